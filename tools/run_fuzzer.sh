#!/usr/bin/env bash
# The body of every cctune_fuzz_target's `<name>_smoke` test (tools/build_defs.bzl): runs the
# libFuzzer binary over a scratch copy of its seed corpus for $FUZZ_SECONDS seconds (default
# 20) or $FUZZ_RUNS executions, and fails on any crash, sanitizer report, leak, timeout or
# out-of-memory, printing the offending input in hex so it can be committed as a seed.
#   run_fuzzer.sh FUZZER DICT|- SEED...
set -uo pipefail
fuzzer="$1"
dict="$2"
shift 2
work="${TEST_TMPDIR:-$(mktemp -d)}/fuzz"
corpus="$work/corpus"
artifacts="$work/artifacts"
mkdir -p "$corpus" "$artifacts"
i=0
for f in "$@"; do
  # Seeds from different folders may share a base name: number them.
  cp "$f" "$corpus/$i-$(basename "$f")"
  i=$((i + 1))
done
# A fixed seed by default, so a CI run replays the same mutations (FUZZ_SEED=0: random, for
# campaigns).
flags=(-artifact_prefix="$artifacts/" -print_final_stats=1 -rss_limit_mb=2560 -timeout=30
       -max_len="${FUZZ_MAX_LEN:-65536}" -seed="${FUZZ_SEED:-1}")
if [ -n "${FUZZ_RUNS:-}" ]; then
  flags+=(-runs="$FUZZ_RUNS")
else
  flags+=(-max_total_time="${FUZZ_SECONDS:-20}")
fi
if [ "$dict" != "-" ]; then flags+=(-dict="$dict"); fi
log="$work/fuzz.log"
"$fuzzer" "${flags[@]}" "$corpus" >"$log" 2>&1
rc=$?
name="$(basename "$fuzzer")"
execs="$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' | tail -n 1)"
rate="$(grep -oE 'stat::average_exec_per_sec: *[0-9]+' "$log" | grep -oE '[0-9]+$' | tail -n 1)"
units="$(ls "$corpus" | wc -l)"
crashes="$(ls "$artifacts" | wc -l)"
echo "fuzz: ${name} executions=${execs:-0} exec_per_s=${rate:-0} corpus=${units} seeds=$# crashes=${crashes} rc=${rc}"
if [ "$rc" -ne 0 ] || [ "$crashes" -ne 0 ]; then
  tail -n 60 "$log"
  for a in "$artifacts"/*; do
    [ -f "$a" ] || continue
    echo "--- $(basename "$a") ($(stat -c %s "$a") bytes), first 512 bytes:"
    head -c 512 "$a" | od -An -tx1 | head -n 32
  done
  exit 1
fi
exit 0
