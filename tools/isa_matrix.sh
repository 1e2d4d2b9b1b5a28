#!/usr/bin/env bash
# Runs the ISA-sensitive tests at every instruction-set level this machine supports below its
# own, through the .bazelrc configs (docs/architecture.md, "CPU instruction sets"):
#
#   bash tools/isa_matrix.sh            # avx2 (if the CPU has AVX-512) and scalar
#   ISA_MATRIX_LEVELS="scalar" bash tools/isa_matrix.sh
#   ISA_MATRIX_TARGETS="//kernels/..." bash tools/isa_matrix.sh
#
# Each level builds the targets for its -march (x86-64-v3 / x86-64-v2), forces the run-time
# kernels with CCTUNE_CPU_ISA and OpenBLAS's with OPENBLAS_CORETYPE, and prints Bazel's test
# summary. Each level has its own output base (~/.cache/bazel_ob/isa_<level>, servers exit
# after 5 idle minutes), so the native build's outputs are left alone and a second run is
# warm; objects also go to the shared disk cache. Exit status: 0 if every level passed,
# else 1 (2 for a usage error).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

# The tests whose results depend on the ISA path: the dispatching kernels and what goes
# through them (GEMM, Linear/Matmul and their backward, f16 conversion), softmax/norm, the
# training step and the decoder backward (float rounding vs. tolerances).
DEFAULT_TARGETS=(
  //kernels/cpu/...
  //kernels:linear_test
  //kernels:linear_backward_test
  //kernels:norm_test
  //kernels:decoder_backward_test
  //checkpoint:dtype_convert_test
  //training:decoder_trainer_test
  //training:train_step_test
  //training:optim_test
  //kernels:optim_test
  //tests/util:float_near_test
)
read -r -a TARGETS <<<"${ISA_MATRIX_TARGETS:-${DEFAULT_TARGETS[*]}}"

flags="$(grep -m1 '^flags' /proc/cpuinfo)"
has() { [[ " $flags " == *" $1 "* ]]; }
native=scalar
if has avx2 && has fma && has f16c; then native=avx2; fi
if [[ $native == avx2 ]] && has avx512f && has avx512bw && has avx512vl && has avx512dq; then
  native=avx512
fi
if [[ -n "${ISA_MATRIX_LEVELS:-}" ]]; then
  read -r -a LEVELS <<<"$ISA_MATRIX_LEVELS"
else
  LEVELS=()
  [[ $native == avx512 ]] && LEVELS+=(avx2)
  [[ $native != scalar ]] && LEVELS+=(scalar)
fi
for l in "${LEVELS[@]}"; do
  [[ $l == avx2 || $l == scalar ]] || { echo "isa_matrix: unknown level '$l' (avx2, scalar)" >&2; exit 2; }
done
echo "== isa_matrix: CPU level $native; levels below it: ${LEVELS[*]:-none}"

status=0
declare -a SUMMARY=()
for level in "${LEVELS[@]}"; do
  start=$(date +%s)
  echo "== --config=$level: ${TARGETS[*]}"
  bazel --output_base="$HOME/.cache/bazel_ob/isa_$level" --max_idle_secs=300 \
    test --config="$level" --symlink_prefix=/ --nocache_test_results --test_summary=short \
    "${TARGETS[@]}" 2>&1 |
    grep -vE '^(Loading|Analyzing|INFO: (Analyzed|Found|From)|\[[0-9,]+ / [0-9,]+\])' |
    grep -vE '^ +bazel-bin/|up-to-date:$'
  rc=${PIPESTATUS[0]}
  secs=$(( $(date +%s) - start ))
  if (( rc == 0 )); then SUMMARY+=("$level: PASSED (${secs}s)"); else SUMMARY+=("$level: FAILED rc=$rc (${secs}s)"); status=1; fi
done
echo "== isa_matrix summary"
printf '   %s\n' "${SUMMARY[@]}"
exit $status
