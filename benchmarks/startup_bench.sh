#!/usr/bin/env bash
# Start-up cost of a recipe binary: `<binary> --help`, N runs (default 20): mean wall time and
# CPU time (perf stat -r N when perf is installed, else a loop timed with date), max RSS
# (/usr/bin/time), and the shared objects it loads at start.
#   bazel build //recipes:generate && benchmarks/startup_bench.sh bazel-bin/recipes/generate [N]
# Timings are this machine's (state the CPU); compare two binaries by alternating runs.
set -euo pipefail
bin=${1:?usage: $0 <recipe binary> [runs]}
runs=${2:-20}
[[ -x $bin ]] || { echo "$0: $bin is not an executable" >&2; exit 2; }
"$bin" --help >/dev/null  # warm the page cache
if command -v perf >/dev/null && perf stat -r 1 true >/dev/null 2>&1; then
  perf stat -r "$runs" -x, -e task-clock,page-faults "$bin" --help 2>&1 >/dev/null |
    awk -F, -v bin="$bin" -v runs="$runs" '
      $3 == "task-clock" { cpu = $1 } $3 == "page-faults" { pf = $1 }
      END { printf "%s --help, %d runs: cpu %.2f ms mean, %d page faults\n", bin, runs, cpu, pf }'
  perf stat -r "$runs" "$bin" --help 2>&1 >/dev/null | awk '/elapsed/ {
      printf "  wall %.2f ms mean (+- %s)\n", $1 * 1e3, $(NF - 1) }'
else
  t0=$(date +%s%N)
  for ((i = 0; i < runs; i++)); do "$bin" --help >/dev/null; done
  t1=$(date +%s%N)
  echo "$bin --help, $runs runs: wall $(((t1 - t0) / runs / 1000)) us mean"
fi
rss=0
for ((i = 0; i < 5; i++)); do
  r=$(/usr/bin/time -f '%M' "$bin" --help 2>&1 >/dev/null | tail -1)
  ((r > rss)) && rss=$r
done
echo "  max RSS $((rss / 1024)).$(((rss % 1024) * 10 / 1024)) MB (5 runs)"
echo "  shared objects loaded at start: $(ldd "$bin" | wc -l)"
ldd "$bin" | awk '{print "    " $1}'
