#!/usr/bin/env bash
# One call on a lent GPU machine: everything a lease should check, in priority order, inside
# LEASE_BUDGET_S seconds (default 400). Made for the `run` tool, after tools/gpu_bundle.sh:
#
#   run(command="bash tools/gpu_lease.sh", carry=["gpu_bundle"], timeout_s=LEASE_BUDGET_S+60)
#
# 1. nvidia-smi, and the card's two ceilings (tools/gpu_ceilings.py: d2d copy GB/s, cuBLAS
#    bf16/fp32 TFLOP/s through PyTorch), ~20 s.
# 2. The GPU suite, gpu_bundle/run.sh (every gpu-tagged test, then cuda_ops_bench and
#    generate_kv_cache on cuda:0), with what is left minus the sanitizer's reserve.
# 3. compute-sanitizer memcheck over cuda_ops_test (out-of-bounds and misaligned accesses the
#    tests' value checks cannot see), with what is left.
# Files in $OUT: ceilings.txt, summary.txt, gpu_suite.log, cuda_ops_bench.json, logs.tgz,
# sanitizer.log. Exit status: run.sh's.
set -u
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
START=$(date +%s)
BUDGET=${LEASE_BUDGET_S:-400}
SAN_RESERVE=${LEASE_SANITIZER_S:-70}
OUT="${OUT:-$ROOT/gpu_bundle/logs}"
mkdir -p "$OUT"
left() { echo $((BUDGET - ($(date +%s) - START))); }

echo "== nvidia-smi"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,temperature.gpu,power.draw \
  --format=csv 2>&1 | head -3
echo "== ceilings"
timeout 60 python3 "$ROOT/tools/gpu_ceilings.py" 2>&1 | tee "$OUT/ceilings.txt"

echo "== GPU suite"
suite_budget=$(( $(left) - SAN_RESERVE ))
GPU_SUITE_BUDGET_S=$suite_budget OUT="$OUT" bash "$ROOT/gpu_bundle/run.sh"
rc=$?

t=$(( $(left) - 5 ))
if command -v compute-sanitizer >/dev/null 2>&1 || [[ -x /usr/local/cuda/bin/compute-sanitizer ]]; then
  if (( t > 20 )); then
    SAN="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
    W="$(mktemp -d)"
    tar -C "$W" -xzf "$ROOT/gpu_bundle/payload.tar.gz"
    echo "== compute-sanitizer memcheck cuda_ops_test (timeout ${t}s)"
    # run.sh's library path: the bundle's lib/ first, then the toolkit's (cuBLAS).
    LD_LIBRARY_PATH="$W/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}" timeout -k 5 "$t" \
      "$SAN" --tool memcheck --print-limit 20 "$W/bin/cuda_ops_test" --gtest_brief=1 \
      >"$OUT/sanitizer.log" 2>&1
    echo "sanitizer rc=$? ($(grep -c '^========= Invalid\|^========= Program hit' "$OUT/sanitizer.log") reports)"
    grep -m1 'ERROR SUMMARY' "$OUT/sanitizer.log"
    grep -m8 -A3 '^========= Invalid\|^========= Program hit' "$OUT/sanitizer.log" | cut -c1-200
    rm -rf "$W"
  else
    echo "== compute-sanitizer: no time left"
  fi
else
  echo "== compute-sanitizer: not on this machine"
fi
echo "== lease script: $(( $(date +%s) - START ))s; suite rc=$rc"
cat "$OUT/summary.txt" 2>/dev/null
exit $rc
