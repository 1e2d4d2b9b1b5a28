#!/usr/bin/env bash
# Runs tests under AddressSanitizer + UBSan (--config=asan) in an output base of its own.
#   tools/sanitize.sh                 # the packages that parse untrusted input (what .ci/run does)
#   tools/sanitize.sh --all           # the whole suite
#   tools/sanitize.sh //kernels/...   # chosen patterns
# Prints Bazel's test summary; exits non-zero on any failure or sanitizer report.
set -uo pipefail
cd "$(dirname "$0")/.."
ob="${CCTUNE_ASAN_OUTPUT_BASE:-$HOME/.cache/bazel_ob/asan}"
if [ "$#" -eq 0 ]; then
  set -- //config/... //checkpoint/... //tokenizers/... //data/...
elif [ "$1" = "--all" ]; then
  # The gpu-tagged tests only skip here; their CUDA code is not instrumented. The mpi-tagged
  # ones are left out: mpirun's ranks run with libmpi's allocations still held at exit (its
  # own caches, not ours), which LeakSanitizer reports as leaks in every rank.
  set -- --test_tag_filters=-mpi //...
fi
exec bazel --output_base="$ob" test --config=asan --symlink_prefix=/ --nocache_test_results \
  --test_output=errors --test_summary=short "$@"
