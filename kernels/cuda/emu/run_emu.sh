#!/bin/bash
# Builds the CUDA backend and its tests against the CPU emulator (emu.h, emu.cc, and the
# stand-in CUDA / cuBLAS / CUB headers in include/) and runs them: a check of the kernels'
# logic, launch configurations and cuBLAS arguments for machines without a GPU. It is not a
# substitute for running the tests on a GPU (see emu.h for what it cannot see).
#
#   [CCTUNE_EMU_TESTS="cuda_ops_test ..."] kernels/cuda/emu/run_emu.sh [--asan] [gtest flags...]
#
# Needs g++, python3, pkg-config and the Debian packages of tools/setup.sh. Builds into
# $CCTUNE_EMU_DIR (default /tmp/cctune_cuda_emu), recompiling only what changed.
set -euo pipefail
emu_dir="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$emu_dir/../../.." && pwd)"
out="${CCTUNE_EMU_DIR:-/tmp/cctune_cuda_emu}"
flags=(-std=c++17 -O1 -g -fopenmp -march=native -w -DCCTUNE_WITH_CUDA=1
       -I"$emu_dir/include" -I"$repo" $(pkg-config --cflags openblas))
if [[ "${1:-}" == "--asan" ]]; then
  shift
  flags+=(-fsanitize=address -fno-omit-frame-pointer)
  out="$out/asan"
  export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=0:detect_stack_use_after_return=0}"
fi
mkdir -p "$out/gen" "$out/obj"
for cu in "$repo"/kernels/cuda/*.cu; do
  python3 "$emu_dir/prep.py" "$cu" "$out/gen/$(basename "$cu" .cu).cc"
done
srcs=($(ls "$repo"/core/*.cc "$repo"/kernels/*.cc "$repo"/kernels/cpu/*.cc \
           "$repo"/kernels/cpu/gemm/*.cc "$repo"/kernels/cuda/*.cc | grep -v -e _test.cc -e _bench.cc)
      "$out"/gen/*.cc "$emu_dir/emu.cc")
# Any header change rebuilds everything (cheap enough, and never stale).
stamp="$out/obj/headers.stamp"
newest_header="$(ls -t "$repo"/core/*.h "$repo"/kernels/*.h "$repo"/kernels/cpu/*.h \
                       "$repo"/kernels/cuda/*.h "$repo"/kernels/cuda/*.cuh \
                       "$emu_dir"/include/*.h | head -1)"
if [[ ! -f "$stamp" || "$newest_header" -nt "$stamp" ]]; then rm -f "$out"/obj/*.o; fi
touch "$stamp"
obj_of() { echo "$out/obj/$(echo "$1" | tr '/' '_').o"; }
jobs_max="$(nproc)"
pids=()
for s in "${srcs[@]}"; do
  o="$(obj_of "$s")"
  [[ -f "$o" && ! "$s" -nt "$o" ]] && continue
  g++ "${flags[@]}" -c "$s" -o "$o" &
  pids+=($!)
  if (( ${#pids[@]} >= jobs_max )); then
    wait "${pids[0]}"
    pids=("${pids[@]:1}")
  fi
done
for p in "${pids[@]}"; do wait "$p"; done
objs=()
for s in "${srcs[@]}"; do objs+=("$(obj_of "$s")"); done
libs=($(pkg-config --libs absl_status absl_statusor absl_strings absl_str_format \
          absl_synchronization gtest gmock openblas) -lgtest_main)
status=0
tests=()
# Every kernels/cuda/*_test.cc, or only those named in $CCTUNE_EMU_TESTS (space-separated).
if [[ -n "${CCTUNE_EMU_TESTS:-}" ]]; then
  read -ra tests <<< "$CCTUNE_EMU_TESTS"
else
  for f in "$repo"/kernels/cuda/*_test.cc; do tests+=("$(basename "$f" .cc)"); done
fi
for t in "${tests[@]}"; do
  g++ "${flags[@]}" "$repo/kernels/cuda/$t.cc" "${objs[@]}" "${libs[@]}" -o "$out/$t"
  echo "== $t (emulated)"
  "$out/$t" "$@" || status=1
done
exit $status
