#!/bin/bash
# Builds the CUDA backend and its tests against the CPU emulator (emu.h, emu.cc, and the
# stand-in CUDA / cuBLAS / CUB headers in include/) and runs them: a check of the kernels'
# logic, launch configurations and cuBLAS arguments for machines without a GPU. It is not a
# substitute for running the tests on a GPU (see emu.h for what it cannot see).
#
#   [CCTUNE_EMU_TESTS="cuda_ops_test ..."] kernels/cuda/emu/run_emu.sh [--asan] [gtest flags...]
#
# Tests from other packages (e.g. a training run on "cuda"): name the packages whose non-test
# sources they need in CCTUNE_EMU_EXTRA and the tests by their path from the repository root,
# without .cc. Those packages' .cc files (minus tests, benchmarks, fuzzers and files with a
# main()) and the C++ of their .proto files (system protoc) go into one static library, so a
# test links only the objects it uses:
#
#   CCTUNE_EMU_EXTRA="checkpoint modules models/... training" \
#   CCTUNE_EMU_TESTS="training/cuda_train_test" kernels/cuda/emu/run_emu.sh
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
           "$repo"/kernels/cpu/gemm/*.cc "$repo"/kernels/cpu/quant/*.cc "$repo"/kernels/cuda/*.cc |
        grep -v -e _test.cc -e _bench.cc)
      "$out"/gen/*.cc "$emu_dir/emu.cc")
# Extra packages ($CCTUNE_EMU_EXTRA): their sources, and C++ generated from their protos.
# "pkg/..." is pkg and every folder below it, as in Bazel.
extra_pkgs=()
if [[ -n "${CCTUNE_EMU_EXTRA:-}" ]]; then
  read -ra requested -d '' <<< "$CCTUNE_EMU_EXTRA" || true  # any whitespace, newlines too
  for pkg in "${requested[@]}"; do
    if [[ "$pkg" == */... ]]; then
      base="${pkg%/...}"
      extra_pkgs+=($(cd "$repo" && find "$base" -type d | sort))
    else
      extra_pkgs+=("$pkg")
    fi
  done
fi
extra_srcs=()
extra_headers=()
extra_libs=()
if (( ${#extra_pkgs[@]} > 0 )); then
  mkdir -p "$out/gen_proto"
  flags+=(-I"$out/gen_proto" $(pkg-config --cflags protobuf))
  for pkg in "${extra_pkgs[@]}"; do
    for proto in "$repo/$pkg"/*.proto; do
      [[ -f "$proto" ]] || continue
      pb_cc="$out/gen_proto/$pkg/$(basename "$proto" .proto).pb.cc"
      if [[ ! -f "$pb_cc" || "$proto" -nt "$pb_cc" ]]; then
        protoc --proto_path="$repo" --cpp_out="$out/gen_proto" "$proto"
      fi
      extra_srcs+=("$pb_cc")
      extra_headers+=("${pb_cc%.cc}.h")
    done
  done
  # The genrules the packages need: recipes' built-in configs (//recipes:embedded_configs) and
  # the model families (//models:embedded_families). Each output is replaced only when it
  # changed, so its object is not rebuilt every time.
  genrule() {  # genrule OUT.cc SCRIPT INPUTS...
    local gen="$out/gen_proto/$1"
    shift
    (cd "$repo" && bash "$@") > "$gen.new"
    cmp -s "$gen.new" "$gen" || cp "$gen.new" "$gen"
    rm -f "$gen.new"
    extra_srcs+=("$gen")
  }
  for pkg in "${extra_pkgs[@]}"; do
    case "$pkg" in
      models) genrule embedded_families.cc models/embed_families.sh \
                $(cd "$repo" && ls models/*/*.yaml | sort) ;;
      recipes) genrule embedded_configs.cc recipes/embed_configs.sh \
                 $(cd "$repo" && find configs -name '*.yaml' | sort) ;;
    esac
  done
  for pkg in "${extra_pkgs[@]}"; do
    for f in "$repo/$pkg"/*.cc; do
      [[ -f "$f" ]] || continue  # a folder without C++ (e.g. a model family's configs only)
      case "$f" in *_test.cc|*_bench.cc|*_benchmark.cc|*_fuzzer.cc) continue ;; esac
      # NCCL has no emulated stand-in (its backend is a library opened at run time anyway).
      grep -q -E '^#include <nccl\.h>' "$f" && continue
      grep -q -E '^int main\(' "$f" && continue
      extra_srcs+=("$f")
    done
    for h in "$repo/$pkg"/*.h; do [[ -f "$h" ]] && extra_headers+=("$h"); done
  done
  # The system libraries the repository's packages use (those pkg-config knows here).
  extra_mods=()
  for m in absl_raw_hash_set absl_hash absl_time absl_cord absl_random_random protobuf \
           yaml-cpp libpcre2-8 sentencepiece ompi; do
    pkg-config --exists "$m" && extra_mods+=("$m")
  done
  extra_libs=($(pkg-config --libs "${extra_mods[@]}"))
  # OpenMPI's headers, for `distributed` (recipes link its process groups).
  pkg-config --exists ompi && flags+=($(pkg-config --cflags ompi))
fi
# Any header change rebuilds everything (cheap enough, and never stale).
stamp="$out/obj/headers.stamp"
newest_header="$(ls -t "$repo"/core/*.h "$repo"/kernels/*.h "$repo"/kernels/cpu/*.h "$repo"/kernels/cpu/quant/*.h \
                       "$repo"/kernels/cuda/*.h "$repo"/kernels/cuda/*.cuh \
                       "$emu_dir"/include/*.h "${extra_headers[@]}" | head -1 || true)"  # head closing the pipe early is not an error
if [[ ! -f "$stamp" || "$newest_header" -nt "$stamp" ]]; then rm -f "$out"/obj/*.o; fi
touch "$stamp"
obj_of() { echo "$out/obj/$(echo "$1" | tr '/' '_').o"; }
jobs_max="$(nproc)"
pids=()
for s in "${srcs[@]}" "${extra_srcs[@]}"; do
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
extra_archive=()
if (( ${#extra_srcs[@]} > 0 )); then
  extra_objs=()
  for s in "${extra_srcs[@]}"; do extra_objs+=("$(obj_of "$s")"); done
  rm -f "$out/libextra.a"
  ar rcs "$out/libextra.a" "${extra_objs[@]}"
  extra_archive=("$out/libextra.a")
fi
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
  # A bare name is a kernels/cuda test; a path ("training/cuda_train_test") is from the root.
  src="$repo/kernels/cuda/$t.cc"
  [[ "$t" == */* ]] && src="$repo/$t.cc"
  bin="$out/$(basename "$t")"
  g++ "${flags[@]}" "$src" "${extra_archive[@]}" "${objs[@]}" "${extra_libs[@]}" "${libs[@]}" \
      -o "$bin"
  echo "== $t (emulated)"
  "$bin" "$@" || status=1
done
exit $status
