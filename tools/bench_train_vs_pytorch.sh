#!/bin/bash
# Training throughput, cctune (benchmarks/train_bench) vs PyTorch eager with torchtune's model
# (tools/golden/bench_train_pytorch.py), same model, data shape, step and thread count; prints
# both and the ratio. Run from the workspace root:
#   tools/bench_train_vs_pytorch.sh [steps] [threads]
# Env: BAZEL_OUTPUT_BASE (bazel --output_base, optional), PYTHON (default python3).
set -euo pipefail
steps="${1:-5}"
threads="${2:-$(nproc)}"
bazel_cmd=(bazel)
if [[ -n "${BAZEL_OUTPUT_BASE:-}" ]]; then bazel_cmd+=("--output_base=${BAZEL_OUTPUT_BASE}"); fi
"${bazel_cmd[@]}" build -c opt //benchmarks:train_bench >&2
bin="$("${bazel_cmd[@]}" info -c opt bazel-bin 2>/dev/null)/benchmarks/train_bench"
args=(--steps "${steps}" --warmup 1 --threads "${threads}")
echo "== cctune =="
cc_out="$(OMP_NUM_THREADS="${threads}" "${bin}" "${args[@]}")"
echo "${cc_out}"
echo "== PyTorch eager =="
py_out="$("${PYTHON:-python3}" tools/golden/bench_train_pytorch.py "${args[@]}" 2>/dev/null)"
echo "${py_out}"
field() { echo "$1" | sed -n "s/^RESULT .*$2=\([0-9.]*\).*/\1/p"; }
cc_tps="$(field "${cc_out}" tokens_per_s)"
py_tps="$(field "${py_out}" tokens_per_s)"
printf '%-16s %12s %10s\n' "" "tokens/s" "GFLOP/s"
printf '%-16s %12s %10s\n' "cctune" "${cc_tps}" "$(field "${cc_out}" gflops)"
printf '%-16s %12s %10s\n' "pytorch eager" "${py_tps}" "$(field "${py_out}" gflops)"
awk -v a="${cc_tps}" -v b="${py_tps}" 'BEGIN { printf "ratio cctune / pytorch: %.2fx\n", a / b }'
