#!/usr/bin/env bash
# Builds every libFuzzer target (cctune_fuzz_target in tools/build_defs.bzl) with
# --config=fuzz (clang, libFuzzer, ASan) in an output base of its own, and runs each one's
# `_smoke` test: a bounded run over its committed seed corpus that fails on any crash.
#   tools/fuzz.sh                       # 20 s per target (FUZZ_SECONDS), what .ci/run does
#   FUZZ_SEED=0 FUZZ_SECONDS=600 tools/fuzz.sh   # a longer campaign (random seed; CI uses 1)
#   FUZZ_RUNS=1000000 tools/fuzz.sh     # a fixed number of executions per target
#   tools/fuzz.sh //config:yaml_fuzzer_smoke   # chosen targets
# Prints Bazel's test summary and one "fuzz: NAME executions=..." line per target.
set -uo pipefail
cd "$(dirname "$0")/.."
ob="${CCTUNE_FUZZ_OUTPUT_BASE:-$HOME/.cache/bazel_ob/fuzz}"
bz=(bazel --output_base="$ob")
if [ "$#" -gt 0 ]; then
  targets=("$@")
else
  mapfile -t targets < <("${bz[@]}" query --noshow_progress 'kind(sh_test, attr(tags, "\bfuzz\b", //...))' 2>/dev/null)
fi
if [ "${#targets[@]}" -eq 0 ]; then
  echo "fuzz.sh: no fuzz targets found" >&2
  exit 1
fi
# --symlink_prefix=/ keeps the workspace's bazel-* links on the main output base.
"${bz[@]}" test --config=fuzz --symlink_prefix=/ --nocache_test_results \
  --test_env=FUZZ_SECONDS --test_env=FUZZ_RUNS --test_env=FUZZ_SEED --test_output=errors --test_summary=short \
  --test_timeout=900 "${targets[@]}"
rc=$?
logs="$("${bz[@]}" info --config=fuzz bazel-testlogs 2>/dev/null)"
for t in "${targets[@]}"; do
  p="${t#//}"
  f="$logs/${p%%:*}/${p##*:}/test.log"
  [ -f "$f" ] && grep -h '^fuzz: ' "$f"
done
exit "$rc"
