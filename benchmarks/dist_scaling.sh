#!/usr/bin/env bash
# Data-parallel scaling: training tokens/s at 1 and 2 ranks of one thread each, on the demo
# and 15M models (benchmarks/dist_scaling_bench.cc: full_finetune_distributed's per-layer
# sharded step, weak scaling), alternating 1 and 2 ranks so that both see the same machine
# load; prints each run, then per model the medians: scaling efficiency (tokens/s at 2 ranks
# over twice that at 1), the exposed (non-overlapped) communication as a share of the 2-rank
# step, and the CPU efficiency (CPU time per step at 1 rank over the largest rank's at 2: what
# the communication costs in CPU, whatever else runs on the machine). `uptime` goes beside.
#
#   benchmarks/dist_scaling.sh [--reps 3] [--steps 5] [--models "demo 15m"] [--reshard 1]
set -euo pipefail
reps=3 steps=5 models="demo 15m" reshard=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --reps) reps="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --models) models="$2"; shift 2 ;;
    --reshard) reshard="$2"; shift 2 ;;
    *) echo "dist_scaling.sh: unknown option $1 (--reps N --steps N --models \"demo 15m\" --reshard 0|1)" >&2; exit 2 ;;
  esac
done
cd "$(dirname "$0")/.."
bazel build //benchmarks:dist_scaling_bench >/dev/null 2>&1 || bazel build //benchmarks:dist_scaling_bench
bench="$(bazel info bazel-bin 2>/dev/null)/benchmarks/dist_scaling_bench"
cpu="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
echo "dist_scaling: $cpu, $(nproc) cores; $reps alternations x $steps timed steps, reshard_after_forward $reshard"
results="$(mktemp)"
trap 'rm -f "$results"' EXIT
for rep in $(seq "$reps"); do
  for model in $models; do
    for np in 1 2; do
      load="$(uptime | sed 's/.*load average: //')"
      # 1 rank: no launcher (the "single" group); 2: mpirun with run_mpi_test.sh's settings.
      if [[ $np == 1 ]]; then
        out="$(OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$bench" --model "$model" --steps "$steps" --reshard "$reshard" 2>&1)"
      else
        out="$(tools/run_mpi_test.sh --np=2 "$bench" --model "$model" --steps "$steps" --reshard "$reshard" 2>&1)"
      fi
      line="$(grep '^RESULT' <<<"$out" || true)"
      if [[ -z $line ]]; then echo "$out" >&2; echo "dist_scaling.sh: no RESULT line" >&2; exit 1; fi
      echo "rep $rep load [$load] ${line#RESULT }"
      echo "$line" >>"$results"
    done
  done
done
python3 - "$results" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    kv = dict(f.split("=", 1) for f in line.split()[1:])
    runs.setdefault((kv["model"], int(kv["ranks"])), []).append(kv)
med = lambda rows, k: statistics.median(float(r[k]) for r in rows)
for model in sorted({m for m, _ in runs}):
    one, two = runs.get((model, 1), []), runs.get((model, 2), [])
    if not one or not two:
        continue
    # Pair the alternations: run i at 1 rank with run i at 2.
    eff = [float(b["tokens_per_s"]) / (2 * float(a["tokens_per_s"])) for a, b in zip(one, two)]
    cpu = [float(a["process_cpu_ms"]) / float(b["process_cpu_ms"]) for a, b in zip(one, two)]
    print("%-5s tokens/s: 1 rank %.0f, 2 ranks %.0f; scaling efficiency %.1f%% (runs: %s); "
          "exposed communication %.1f%% of the 2-rank step (%.1f ms of %.1f); CPU efficiency "
          "%.1f%% (CPU ms/step: 1 rank %.1f, 2 ranks %.1f)" % (
              model, med(one, "tokens_per_s"), med(two, "tokens_per_s"),
              100 * statistics.median(eff), " ".join("%.0f%%" % (100 * e) for e in eff),
              med(two, "exposed_comm_pct"), med(two, "exposed_comm_ms"), med(two, "step_ms"),
              100 * statistics.median(cpu), med(one, "process_cpu_ms"), med(two, "process_cpu_ms")))
PY
