#!/bin/bash
# Training throughput, cctune (benchmarks/train_bench) vs PyTorch eager with torchtune's model
# (tools/golden/bench_train_pytorch.py), same model, data shape, step and thread count; prints
# both, cctune's step profile, the peak RSS of both processes and the ratio. With rounds > 1
# the two alternate (cctune, PyTorch, cctune, ...) so that both see the same machine load,
# and each round's ratio is printed. Run from the workspace root:
#   tools/bench_train_vs_pytorch.sh [steps] [threads] [rounds] [f32|bf16] [15m|demo]
# bf16: cctune keeps bf16 weights with f32 gradients and AdamW masters; PyTorch casts the
# model to bf16 as torchtune's `dtype: bf16` does (BF16_MODE=autocast: f32 parameters and
# torch.autocast bf16 instead; see tools/golden/bench_train_pytorch.py).
# Env: BAZEL_OUTPUT_BASE (bazel --output_base, optional), PYTHON (default python3),
# CCTUNE_CPU_ISA (e.g. avx2: cctune's kernels at that level; OpenBLAS is then pointed at its
# Haswell kernels with OPENBLAS_CORETYPE, and PyTorch at AVX2 with ATEN_CPU_CAPABILITY=avx2,
# ONEDNN_MAX_CPU_ISA=AVX2 and MKL_ENABLE_INSTRUCTIONS=AVX2, each unless set, so both whole
# steps run AVX2 as on an AVX2-only machine; PyTorch's line prints its capability).
set -euo pipefail
steps="${1:-5}"
threads="${2:-$(nproc)}"
rounds="${3:-1}"
dtype="${4:-f32}"
model="${5:-15m}"
bazel_cmd=(bazel)
if [[ -n "${BAZEL_OUTPUT_BASE:-}" ]]; then bazel_cmd+=("--output_base=${BAZEL_OUTPUT_BASE}"); fi
"${bazel_cmd[@]}" build -c opt //benchmarks:train_bench >&2
bin="$("${bazel_cmd[@]}" info -c opt bazel-bin 2>/dev/null)/benchmarks/train_bench"
if [[ "${CCTUNE_CPU_ISA:-}" == "avx2" ]]; then
  # The AVX2-only case on an AVX-512 machine, for both sides (each unless already set):
  # OpenBLAS's Haswell kernels; PyTorch's ATen kernels, oneDNN and MKL at AVX2.
  export OPENBLAS_CORETYPE="${OPENBLAS_CORETYPE:-Haswell}"
  export ATEN_CPU_CAPABILITY="${ATEN_CPU_CAPABILITY:-avx2}"
  export ONEDNN_MAX_CPU_ISA="${ONEDNN_MAX_CPU_ISA:-AVX2}"
  export MKL_ENABLE_INSTRUCTIONS="${MKL_ENABLE_INSTRUCTIONS:-AVX2}"
fi
args=(--steps "${steps}" --warmup 1 --threads "${threads}" --model "${model}" --dtype "${dtype}")
echo "uptime before: $(uptime)"
py="${PYTHON:-python3}"
have_torch=1
# --help imports torch and torchtune (through the script's torchao shim for newer torchao).
if ! "${py}" tools/golden/bench_train_pytorch.py --help >/dev/null 2>&1; then
  have_torch=0
  echo "(PyTorch eager skipped: ${py} cannot import torch and torchtune)"
fi
field() { echo "$1" | sed -n "s/^RESULT .*$2=\([0-9.]*\).*/\1/p"; }
pairs=""  # "cctune pytorch" tokens/s per round
for ((round = 1; round <= rounds; ++round)); do
  echo "== round ${round}: cctune =="
  cc_out="$(OMP_NUM_THREADS="${threads}" "${bin}" "${args[@]}")"
  echo "${cc_out}"
  py_out=""
  if ((have_torch)); then
    echo "== round ${round}: PyTorch eager =="
    py_out="$("${py}" tools/golden/bench_train_pytorch.py "${args[@]}" \
      --bf16_mode "${BF16_MODE:-params}" 2>/dev/null)"
    echo "${py_out}"
  fi
  printf '%-16s %12s %10s %14s\n' "" "tokens/s" "GFLOP/s" "peak RSS MiB"
  printf '%-16s %12s %10s %14s\n' "cctune" "$(field "${cc_out}" tokens_per_s)" \
    "$(field "${cc_out}" gflops)" "$(field "${cc_out}" peak_rss_mib)"
  if ((have_torch)); then
    printf '%-16s %12s %10s %14s\n' "pytorch eager" "$(field "${py_out}" tokens_per_s)" \
      "$(field "${py_out}" gflops)" "$(field "${py_out}" peak_rss_mib)"
    awk -v a="$(field "${cc_out}" tokens_per_s)" -v b="$(field "${py_out}" tokens_per_s)" \
      -v r="${round}" 'BEGIN { printf "round %d ratio cctune / pytorch: %.2fx\n", r, a / b }'
    pairs+="$(field "${cc_out}" tokens_per_s) $(field "${py_out}" tokens_per_s)"$'\n'
  fi
  echo "uptime after round ${round}: $(uptime)"
done
# On a shared machine single rounds swing with the other processes' load: the best round of
# each side (the least disturbed) and the median of the per-round ratios.
if ((rounds > 1 && have_torch)); then
  printf '%s' "${pairs}" | awk -v n="${rounds}" '
    { cc[NR] = $1; py[NR] = $2; r[NR] = $1 / $2; if ($1 > bc) bc = $1; if ($2 > bp) bp = $2 }
    END {
      for (i = 1; i <= NR; ++i) {
        for (j = i + 1; j <= NR; ++j) if (r[j] < r[i]) { t = r[i]; r[i] = r[j]; r[j] = t }
      }
      med = NR % 2 ? r[(NR + 1) / 2] : (r[NR / 2] + r[NR / 2 + 1]) / 2
      printf "best of %d rounds: cctune %.1f tokens/s, pytorch %.1f tokens/s, ratio %.2fx; ", \
        n, bc, bp, bc / bp
      printf "median round ratio %.2fx\n", med
    }'
fi
