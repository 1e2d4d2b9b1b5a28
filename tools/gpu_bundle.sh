#!/usr/bin/env bash
# Builds the CUDA ("gpu"-tagged) tests and the two benchmarks with Bazel and packs them into a
# self-contained folder for a machine with a GPU but no Bazel, no apt and none of the system
# libraries cctune links (abseil, yaml-cpp, protobuf, OpenBLAS, GoogleTest, ...):
#
#   bash tools/gpu_bundle.sh [DEST]          # DEST defaults to gpu_bundle/ at the repo root
#
# then, on the lent GPU machine (the `run` tool, carry ["gpu_bundle"]):
#
#   bash gpu_bundle/run.sh
#
# DEST holds run.sh (see its header), MANIFEST.txt, tests.txt / benches.txt and
# payload.tar.gz: bin/ (the stripped binaries) and lib/ (every shared library they load that
# the GPU machine is not expected to have: Bazel's own _solib libraries, abseil, protobuf,
# yaml-cpp, OpenBLAS + libgfortran, gtest, benchmark, libgomp, libcudart, ..., and
# libcctune_cuda.so, the CUDA backend that recipe binaries open at run time from ../lib),
# which run.sh unpacks into a temporary folder. Left out on purpose, to come from the GPU machine: glibc (libc, libm,
# libpthread, libdl, librt, ld-linux), libstdc++ and libgcc_s (newer there: Ubuntu 24.04,
# glibc 2.39, against Debian 12's 2.36 here), the driver (libcuda, libnvidia-*) and cuBLAS
# (libcublas + libcublasLt are ~0.5 GB; run.sh finds the toolkit's or the pip wheels' copies).
# libcudart (<1 MB) is carried so the runtime matches the 13.0 headers the kernels were built
# against; the driver there (580) supports CUDA 13.0.
#
# Code is built with --config=portable (-march=x86-64-v2, generic tuning) instead of the
# default -march=native: the GPU host's CPU model is not known, and the SIMD kernels still
# pick AVX2 / AVX-512 there at run time (kernels/cpu/isa.h). Before building, `bazel aquery`
# checks every compile action of the bundle's targets: the script stops if -march=native
# reaches any of them. (A --copt=-march=... appended after .bazelrc's would not do: a config
# has to replace -march, see CCTUNE_MARCH_COPTS in tools/build_defs.bzl.) Another config:
# GPU_BUNDLE_CONFIG=avx2 (x86-64-v3). Bazel output base: $GPU_BUNDLE_OUTPUT_BASE, default
# ~/.cache/bazel_ob/gpubundle (a separate one, so other builds' outputs are untouched).
# GPU_BUNDLE_CHECK_ONLY=1 stops after the flag check.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="${1:-$ROOT/gpu_bundle}"
OUTPUT_BASE="${GPU_BUNDLE_OUTPUT_BASE:-$HOME/.cache/bazel_ob/gpubundle}"
CONFIG="${GPU_BUNDLE_CONFIG:-portable}"
MAX_MB=40  # the run tool carries 64 MiB in all, the working tree (~8 MB) included

# Test binaries, then benchmarks (run.sh runs them in this order).
TESTS=(
  //kernels/cuda:cuda_device_test
  //kernels/cuda:cuda_ops_test
  //kernels/cuda:cuda_backward_ops_test
  //kernels/cuda:cuda_attention_backward_test
  //kernels/cuda:cuda_optim_test
  //kernels/cuda:cuda_dropout_test
  //kernels/cuda:cuda_quant_test
  //training:optim_cuda_test
  //training:cuda_train_test
  //recipes:cuda_recipes_test
  # A world-of-one NCCL communicator (NCCL allows one rank per GPU; the machine has one GPU
  # and no mpirun: a world of one needs no MPI bootstrap).
  //distributed:nccl_process_group_test
)
BENCHES=(
  //kernels/cuda:cuda_ops_bench
  //benchmarks:generate_kv_cache
)
# Shared libraries opened at run time (dlopen), shipped in lib/ where core/backend_library.cc
# looks (the binary's ../lib): the CUDA backend that CPU-linked recipe binaries load for cuda.
DLOPENED=(
  //kernels/cuda:libcctune_cuda.so
  //distributed:libcctune_nccl.so
)

# Sonames the GPU machine supplies itself (see the header). Everything else ldd reports is
# carried; a library ldd cannot find here is an error. libnccl.so.2 (218 MB, for
# libcctune_nccl.so) is the GPU machine's too: its NCCL test skips, saying so, without it.
EXCLUDE_RE='^(linux-vdso\.so|ld-linux-x86-64\.so|libc\.so|libm\.so|libmvec\.so|libpthread\.so|libdl\.so|librt\.so|libutil\.so|libresolv\.so|libstdc\+\+\.so|libgcc_s\.so|libcuda\.so|libnvidia-|libcublas\.so|libcublasLt\.so|libnccl\.so)'

die() { echo "gpu_bundle: $*" >&2; exit 1; }

cd "$ROOT"
[[ -x /usr/local/cuda/bin/nvcc || -n "${CUDA_PATH:-}" ]] ||
  die "no CUDA toolkit here (/usr/local/cuda or \$CUDA_PATH): the cuda libraries would build empty"

BAZEL_FLAGS=(--config="$CONFIG" --symlink_prefix=/)
[[ "$CONFIG" != native ]] || die "GPU_BUNDLE_CONFIG=native: the bundle runs on another host"

# Every gpu-tagged test must be in TESTS (a new one left out would never run on a GPU).
GPU_TESTS="$(bazel --output_base="$OUTPUT_BASE" query 'attr(tags, "\bgpu\b", tests(//...))' 2>/dev/null)" ||
  die "bazel query for the gpu-tagged tests failed"
for t in $GPU_TESTS; do
  [[ " ${TESTS[*]} " == *" $t "* ]] || die "$t is tagged gpu but not in TESTS: add it"
done

# Every C++ compile action of the bundle must carry one -march, and never "native".
echo "== bazel aquery: -march of the compile actions (--config=$CONFIG)"
targets="$(printf ' + %s' "${TESTS[@]}" "${BENCHES[@]}" "${DLOPENED[@]}")"
AQUERY="$(bazel --output_base="$OUTPUT_BASE" aquery "${BAZEL_FLAGS[@]}" --output=text \
  "mnemonic('CppCompile', deps(${targets# + }))" 2>/dev/null)" || die "bazel aquery failed"
compiles="$(grep -c "^action 'Compiling" <<<"$AQUERY" || true)"
marches="$(grep -o -- '-march=[A-Za-z0-9_.-]*' <<<"$AQUERY" | sort | uniq -c | tr -s ' \n' ' ')"
echo "   $compiles compile actions; $marches"
(( compiles > 0 )) || die "aquery found no compile actions"
if grep -q -- '-march=native' <<<"$AQUERY"; then
  die "-march=native reaches $(grep -c -- '-march=native' <<<"$AQUERY") compile actions of the bundle"
fi
MARCH="$(grep -o -- '-march=[A-Za-z0-9_.-]*' <<<"$AQUERY" | sort -u | tr '\n' ' ')"
[[ -z "${GPU_BUNDLE_CHECK_ONLY:-}" ]] || { echo "== flags ok (GPU_BUNDLE_CHECK_ONLY: not building)"; exit 0; }

echo "== bazel build (output base $OUTPUT_BASE, --config=$CONFIG: $MARCH)"
bazel --output_base="$OUTPUT_BASE" build "${BAZEL_FLAGS[@]}" "${TESTS[@]}" "${BENCHES[@]}" \
  "${DLOPENED[@]}"
BIN_DIR="$(bazel --output_base="$OUTPUT_BASE" info "${BAZEL_FLAGS[@]}" bazel-bin 2>/dev/null)"
grep -q 'CUDA_ENABLED = True' "$OUTPUT_BASE/external/local_cuda/defs.bzl" ||
  die "@local_cuda is disabled ($(grep CUDA_MISSING "$OUTPUT_BASE/external/local_cuda/defs.bzl"))"

# A label's binary: //pkg:name -> $BIN_DIR/pkg/name.
label_path() { local l="${1#//}"; echo "$BIN_DIR/${l%%:*}/${l##*:}"; }

# bin/ and lib/ are staged, then packed into DEST/payload.tar.gz (OpenBLAS alone is 36 MB:
# unpacked the bundle would be ~66 MB; gzip, which every Linux image has, makes it ~22 MB).
STAGE="$(mktemp -d "${TMPDIR:-/tmp}/gpu_bundle_stage.XXXXXX")"
trap 'rm -rf "$STAGE"' EXIT
rm -rf "$DEST"
mkdir -p "$DEST" "$STAGE/bin" "$STAGE/lib"

echo "== binaries and libraries -> $DEST"
declare -A CARRIED=()  # soname -> where it came from
for label in "${TESTS[@]}" "${BENCHES[@]}" "${DLOPENED[@]}"; do
  src="$(label_path "$label")"
  [[ -x "$src" ]] || die "$label: no binary at $src"
  name="$(basename "$src")"
  dir=bin
  [[ " ${DLOPENED[*]} " == *" $label "* ]] && dir=lib
  cp "$src" "$STAGE/$dir/$name"
  chmod u+w "$STAGE/$dir/$name"
  strip --strip-unneeded "$STAGE/$dir/$name"
  # ldd lists the whole closure (libraries of libraries too), resolved through the binary's
  # RUNPATH ($ORIGIN/.../_solib_k8 for Bazel's libraries) and the system's paths.
  ldd_out="$(ldd "$src")"
  if grep -q 'not found' <<<"$ldd_out"; then
    die "$label: unresolved libraries here: $(grep 'not found' <<<"$ldd_out" | tr -s ' \t' ' ')"
  fi
  while read -r soname arrow path _; do
    [[ "$arrow" == "=>" && -n "$path" ]] || continue
    [[ "$soname" =~ $EXCLUDE_RE ]] && continue
    [[ -n "${CARRIED[$soname]:-}" ]] && continue
    CARRIED[$soname]="$(readlink -f "$path")"
    cp -L "$path" "$STAGE/lib/$soname"
    chmod u+w "$STAGE/lib/$soname"
    strip --strip-unneeded "$STAGE/lib/$soname" 2>/dev/null || true
  done <<<"$ldd_out"
done

# Libraries the binaries dlopen() by soname, which ldd cannot see: OpenBLAS, opened at the
# first f32 GEMM (kernels/cpu/blas_shim), with its own closure (libgfortran, libquadmath).
for soname in libopenblas.so.0; do
  path="$(ldconfig -p | awk -v s="$soname" '$1 == s && /x86-64/ { print $NF; exit }')"
  [[ -n "$path" ]] || die "$soname (opened at run time by kernels/cpu/blas_shim) not found here"
  while read -r dep arrow dpath _; do
    [[ "$arrow" == "=>" && -n "$dpath" ]] || continue
    [[ "$dep" =~ $EXCLUDE_RE || -n "${CARRIED[$dep]:-}" ]] && continue
    CARRIED[$dep]="$(readlink -f "$dpath")"
    cp -L "$dpath" "$STAGE/lib/$dep"
    chmod u+w "$STAGE/lib/$dep"
    strip --strip-unneeded "$STAGE/lib/$dep" 2>/dev/null || true
  done < <(echo "$soname => $path"; ldd "$path")
done

# The runner, test list and manifest.
printf '%s\n' "${TESTS[@]##*:}" >"$DEST/tests.txt"
printf '%s\n' "${BENCHES[@]##*:}" >"$DEST/benches.txt"

# Highest glibc / libstdc++ symbol versions the carried files need (the GPU machine must have
# at least these).
max_ver() {
  objdump -T "$STAGE"/bin/* "$STAGE"/lib/* 2>/dev/null | grep -o "$1_[0-9.]*" | sort -uV | tail -1
}
{
  echo "cctune GPU bundle, built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
  echo "git: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$ROOT" diff --quiet 2>/dev/null || echo ' (+ uncommitted changes)')"
  echo "config: $CONFIG ($MARCH, run-time SIMD dispatch); nvcc: $(/usr/local/cuda/bin/nvcc --version 2>/dev/null | grep -o 'release [0-9.]*' || echo '?')"
  echo "needs from the GPU machine: $(max_ver GLIBC) or newer, $(max_ver GLIBCXX) or newer," \
    "libgcc_s, the NVIDIA driver (libcuda), libcublas.so.13 + libcublasLt.so.13"
  echo "unpacked: $(du -sk "$STAGE" | cut -f1) KiB in $(ls "$STAGE/bin" | wc -l) binaries and $(ls "$STAGE/lib" | wc -l) libraries (payload.tar.gz)"
  echo "carried libraries (soname <- source):"
  for s in $(printf '%s\n' "${!CARRIED[@]}" | sort); do echo "  $s <- ${CARRIED[$s]}"; done
} >"$DEST/MANIFEST.txt"
tar -C "$STAGE" -cf - bin lib | gzip -9 >"$DEST/payload.tar.gz"

cat >"$DEST/run.sh" <<'RUN_SH'
#!/usr/bin/env bash
# Runs the cctune CUDA tests and benchmarks of this bundle (made by tools/gpu_bundle.sh) on a
# machine with a GPU, Bazel-free:
#
#   bash gpu_bundle/run.sh
#
# It unpacks payload.tar.gz (bin/, lib/) into a temporary folder. Libraries: the bundle's lib/
# first, then the machine's CUDA library dirs (for libcublas / libcublasLt): $CUDA_PATH/lib64,
# /usr/local/cuda*/lib64, /usr/local/cuda*/targets/*/lib, /usr/local/nvidia/lib64, python
# site-packages' nvidia/*/lib; then $LD_LIBRARY_PATH. A preflight ldd marks a binary whose
# libraries do not all resolve "MISSING LIBS" instead of running it. Each test runs with
# --gtest_brief=1 under a timeout, in its own TEST_TMPDIR; then cuda_ops_bench (short
# --benchmark_min_time) and generate_kv_cache (decode on cuda:0 with a GPU, a short CPU decode without). Logs: $OUT if set, else gpu_bundle/logs/ —
# summary.txt, gpu_suite.log (every log, concatenated), cuda_ops_bench.json, logs.tgz (one log
# per binary); 4 files, within the run tool's 8-file limit. The summary table is printed last.
# Exit status: 0 when nothing failed, crashed or timed out (skips are fine), else 1.
#
# Time: the whole run is kept under GPU_SUITE_BUDGET_S seconds (default 450): each test gets
# min(GPU_TEST_TIMEOUT_S (default 150), what is left minus the benchmarks' reserve); binaries
# that no longer fit are reported "not run". GPU_SUITE_FILTER=REGEX runs only matching binaries.
set -u
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
START=$(date +%s)
BUDGET=${GPU_SUITE_BUDGET_S:-450}
TEST_TIMEOUT=${GPU_TEST_TIMEOUT_S:-150}
BENCH_TIMEOUT=${GPU_BENCH_TIMEOUT_S:-75}
FILTER=${GPU_SUITE_FILTER:-.}
LOGROOT="${OUT:-$HERE/logs}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/gpu_suite.XXXXXX")"
LOGS="$WORK/logs"
mkdir -p "$LOGS" "$LOGROOT"
trap 'rm -rf "$WORK"' EXIT
tar -C "$WORK" -xzf "$HERE/payload.tar.gz" || { echo "run.sh: cannot unpack $HERE/payload.tar.gz"; exit 1; }
B="$WORK"  # bin/ and lib/

# --- library path -------------------------------------------------------------------------
cuda_dirs=()
add_dir() { local d; for d in "$@"; do [[ -d "$d" ]] && cuda_dirs+=("$d"); done; }
[[ -n "${CUDA_PATH:-}" ]] && add_dir "$CUDA_PATH/lib64"
add_dir /usr/local/cuda/lib64 /usr/local/cuda/targets/*/lib /usr/local/cuda-*/lib64 \
  /usr/local/cuda-*/targets/*/lib
add_dir /usr/local/nvidia/lib64 /usr/local/nvidia/lib  # the driver's libcuda, if not in ld.so.cache
site_dirs=()
for py in python3 /opt/*/.venv/bin/python3; do
  command -v "$py" >/dev/null 2>&1 || continue
  while read -r d; do site_dirs+=("$d"); done < <("$py" -c \
    'import site, sys; print("\n".join(site.getsitepackages() + [site.getusersitepackages()]))' \
    2>/dev/null)
done
site_dirs+=(/usr/lib/python3/dist-packages /usr/local/lib/python3*/dist-packages
  /usr/local/lib/python3*/site-packages /opt/*/.venv/lib/python3*/site-packages)
for d in "${site_dirs[@]}"; do add_dir "$d"/nvidia/*/lib "$d"/nvidia/*/lib64; done
# Unique, in order; only dirs holding a CUDA library (or NCCL: nvidia/nccl/lib).
LIBPATH="$B/lib"
declare -A seen=()
for d in "${cuda_dirs[@]}"; do
  d="$(readlink -f "$d")"
  [[ -n "${seen[$d]:-}" ]] && continue
  seen[$d]=1
  { compgen -G "$d/libcu*.so*" || compgen -G "$d/libnccl*.so*"; } >/dev/null && LIBPATH="$LIBPATH:$d"
done
export LD_LIBRARY_PATH="$LIBPATH${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

say() { echo "$*" | tee -a "$LOGS/00_setup.log"; }
say "== cctune GPU suite: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname 2>/dev/null || echo '?')"
sed -n '1,4p' "$HERE/MANIFEST.txt" | tee -a "$LOGS/00_setup.log"
say "glibc here: $(getconf GNU_LIBC_VERSION 2>/dev/null || echo '?'); CPU: $(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//')"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi -L 2>&1 | tee -a "$LOGS/00_setup.log"
  nvidia-smi --query-gpu=driver_version,memory.total --format=csv,noheader 2>&1 |
    sed 's/^/driver, memory: /' | tee -a "$LOGS/00_setup.log"
else
  say "nvidia-smi: not found (no NVIDIA driver?)"
fi
say "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"

# --- preflight: every library each binary needs must resolve ------------------------------
declare -A MISSING=()
for b in "$B"/bin/*; do
  n="$(basename "$b")"
  out="$(ldd "$b" 2>&1)"
  printf '### ldd %s\n%s\n' "$n" "$out" >>"$LOGS/01_ldd.log"
  miss="$(grep 'not found' <<<"$out" | awk '{print $1}' | sort -u | tr '\n' ' ')"
  [[ -n "$miss" ]] && MISSING[$n]="$miss"
done
# Where the libraries outside the bundle come from (once, for the first binary using cuBLAS).
for b in "$B"/bin/*; do
  out="$(ldd "$b" 2>/dev/null)"
  grep -q libcublas <<<"$out" || continue
  say "outside the bundle: $(grep '=>' <<<"$out" | grep -v "$B/lib/" | awk '{print $1 " -> " $3}' | tr '\n' ';' | sed 's/;$//; s/;/; /g')"
  break
done
for n in "${!MISSING[@]}"; do say "MISSING libraries for $n: ${MISSING[$n]}"; done

# --- running ------------------------------------------------------------------------------
ROWS=()   # "name|status|passed|failed|skipped|seconds"
FAILED_ANY=0
left() { echo $((BUDGET - ($(date +%s) - START))); }

# Output of a failing/crashed binary worth showing on the console (the run tool keeps the tail).
show_failure() {
  local log="$1"
  echo "---- ${2}: first failures (full log: $(basename "$log"))"
  { grep -E -A8 'Failure$|Expected|error|Error|ERROR' "$log" | head -40; tail -5 "$log"; } |
    cut -c1-300
  echo "----"
}

run_test() {
  local n="$1" b="$B/bin/$1" log="$LOGS/$1.log"
  if [[ -n "${MISSING[$n]:-}" ]]; then
    ROWS+=("$n|MISSING LIBS|-|-|-|0"); FAILED_ANY=1; return
  fi
  local reserve=$((2 * BENCH_TIMEOUT / 3)) t
  t=$(( $(left) - reserve ))
  (( t > TEST_TIMEOUT )) && t=$TEST_TIMEOUT
  if (( t < 10 )); then ROWS+=("$n|not run (time)|-|-|-|0"); return; fi
  local tmp="$WORK/tmp_$n"; mkdir -p "$tmp"
  local s0=$(date +%s) rc
  echo "-- $n (timeout ${t}s)"
  TEST_TMPDIR="$tmp" OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-passive}" \
    timeout -k 10 "$t" "$b" --gtest_brief=1 --gtest_color=no >"$log" 2>&1
  rc=$?
  local secs=$(( $(date +%s) - s0 ))
  rm -rf "$tmp"
  local ran passed failed skipped status
  ran=$(grep -Eo '^\[==========\] [0-9]+ tests? from .* ran' "$log" | grep -Eo '[0-9]+' | head -1)
  passed=$(grep -Eo '^\[  PASSED  \] [0-9]+' "$log" | grep -Eo '[0-9]+$' | head -1)
  # "[  SKIPPED ] 3 tests." (--gtest_brief) or "..., listed below:"; not the per-test lines.
  failed=$(grep -Eo '^\[  FAILED  \] [0-9]+ tests?[,.]' "$log" | grep -Eo '[0-9]+' | head -1)
  skipped=$(grep -Eo '^\[  SKIPPED \] [0-9]+ tests?[,.]' "$log" | grep -Eo '[0-9]+' | head -1)
  passed=${passed:-0}; failed=${failed:-0}; skipped=${skipped:-0}
  if (( rc == 124 || rc == 137 )); then status="TIMEOUT"
  elif [[ -z "$ran" ]]; then status="CRASH rc=$rc"
  elif (( failed > 0 || rc != 0 )); then status="FAILED"
  elif (( passed + skipped != ran )); then status="FAILED (counts?)"
  elif (( passed == 0 && skipped > 0 )); then status="skipped"
  else status="ok"; fi
  [[ "$status" == ok || "$status" == skipped ]] || FAILED_ANY=1
  # The skip reason (no GPU) once, so a dry run shows why.
  if [[ "$status" == skipped ]]; then
    grep -m1 -Eo 'no CUDA device: .*' "$log" | cut -c1-160 | sed 's/^/   /'
  fi
  [[ "$status" == ok || "$status" == skipped ]] || show_failure "$log" "$n"
  ROWS+=("$n|$status|$passed|$failed|$skipped|$secs")
}

run_bench() {
  local n="$1" b="$B/bin/$1" log="$LOGS/$1.log" rc args=()
  if [[ -n "${MISSING[$n]:-}" ]]; then
    ROWS+=("$n|MISSING LIBS|-|-|-|0"); FAILED_ANY=1; return
  fi
  local t=$(left)
  (( t > BENCH_TIMEOUT )) && t=$BENCH_TIMEOUT
  if (( t < 10 )); then ROWS+=("$n|not run (time)|-|-|-|0"); return; fi
  case "$n" in
    cuda_ops_bench)
      args=(--benchmark_min_time=0.05 --benchmark_counters_tabular=true
        "--benchmark_out=$LOGS/cuda_ops_bench.json" --benchmark_out_format=json) ;;
    generate_kv_cache)
      # With a GPU: decode on cuda:0 after a 1024-token prompt (grouped vs expanded cache);
      # without one, a short CPU decode.
      if nvidia-smi -L >/dev/null 2>&1; then
        args=(--device cuda:0 --prompt_tokens 1024 --new_tokens 64 --repeats 2)
      else
        args=(--prompt_tokens 8 --new_tokens 8 --repeats 1)
      fi ;;
  esac
  local s0=$(date +%s)
  echo "-- $n ${args[*]} (timeout ${t}s)"
  timeout -k 10 "$t" "$b" "${args[@]}" >"$log" 2>&1
  rc=$?
  local secs=$(( $(date +%s) - s0 )) passed=0 failed=0 skipped=0 status
  if [[ "$n" == cuda_ops_bench ]]; then
    # Rows: a benchmark line with numbers, or an "ERROR OCCURRED" (skipped without a device).
    skipped=$(grep -c "ERROR OCCURRED: 'no CUDA device" "$log")
    failed=$(grep 'ERROR OCCURRED' "$log" | grep -vc "no CUDA device")
    passed=$(grep -E '^BM_' "$log" | grep -vc 'ERROR OCCURRED')
  else
    (( rc == 0 )) && passed=1 || failed=1
  fi
  if (( rc == 124 || rc == 137 )); then status="TIMEOUT"
  elif (( rc != 0 || failed > 0 )); then status="FAILED rc=$rc"
  elif (( passed == 0 && skipped > 0 )); then status="skipped"
  else status="ok"; fi
  [[ "$status" == ok || "$status" == skipped ]] || FAILED_ANY=1
  [[ "$status" == skipped ]] && grep -m1 -Eo "no CUDA device: [^']*" "$log" | cut -c1-160 | sed 's/^/   /'
  [[ "$status" == ok || "$status" == skipped ]] || show_failure "$log" "$n"
  # The benchmark tables are short: show them.
  [[ "$status" == ok ]] && grep -vE '^\s*$|^-+$|^\*\*\*' "$log" | cut -c1-140 | head -45
  ROWS+=("$n|$status|$passed|$failed|$skipped|$secs")
}

while read -r n; do [[ "$n" =~ $FILTER ]] && run_test "$n"; done <"$HERE/tests.txt"
while read -r n; do [[ "$n" =~ $FILTER ]] && run_bench "$n"; done <"$HERE/benches.txt"

# --- logs and summary ---------------------------------------------------------------------
{
  printf '%-30s %-16s %7s %7s %8s %7s\n' binary status passed failed skipped wall_s
  for r in "${ROWS[@]}"; do
    IFS='|' read -r n s p f k w <<<"$r"
    printf '%-30s %-16s %7s %7s %8s %7s\n' "$n" "$s" "$p" "$f" "$k" "$w"
  done
  echo "total wall time: $(( $(date +%s) - START ))s; result: $([[ $FAILED_ANY == 0 ]] && echo PASS || echo FAIL)"
} >"$WORK/summary.txt"
for f in "$LOGS"/*.log; do printf '\n######## %s\n' "$(basename "$f")"; cat "$f"; done |
  head -c 15000000 >"$LOGROOT/gpu_suite.log"
cp "$WORK/summary.txt" "$LOGROOT/summary.txt"
[[ -f "$LOGS/cuda_ops_bench.json" ]] && cp "$LOGS/cuda_ops_bench.json" "$LOGROOT/"
tar -C "$WORK" -czf "$LOGROOT/logs.tgz" logs
echo
echo "== logs in $LOGROOT (summary.txt, gpu_suite.log, logs.tgz)"
echo "== summary"
cat "$WORK/summary.txt"
exit $FAILED_ANY
RUN_SH
chmod +x "$DEST/run.sh"

size_kb="$(du -sk "$DEST" | cut -f1)"
echo "== $DEST: $(ls "$STAGE/bin" | wc -l) binaries, $(ls "$STAGE/lib" | wc -l) libraries," \
  "$((size_kb / 1024)) MiB ($(( $(du -sk "$STAGE" | cut -f1) / 1024 )) MiB unpacked)"
(( size_kb < MAX_MB * 1024 )) || die "bundle is $((size_kb / 1024)) MiB, over the ${MAX_MB} MiB budget"
