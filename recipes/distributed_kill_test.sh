#!/usr/bin/env bash
# kill -9 of one rank of a real 2-rank full_finetune_distributed run (mpirun, through
# tools/run_mpi_test.sh, one thread per rank) on the demo config, checkpointing every 2 steps.
# Rank 1 SIGKILLs itself ($CCTUNE_TEST_SIGKILL_AT_STEP, recipes/data_parallel_strategy.h):
#
#   1. after step 5: rank 0 sees at its next collective that rank 1's process is gone and
#      exits non-zero at once, naming the collective and rank 1 (mpirun then reports rank 1's
#      signal 9 or, when it notices rank 0's exit first, rank 0's non-zero status: either);
#   2. in the save of step 6, after the weights are gathered: rank 0 has written step_6's
#      weights when its barrier finds rank 1 gone; the failed save is removed, LATEST still
#      names step_4;
#   3. as 1 with the process watch off (CCTUNE_MPI_WATCH_PEERS=0, as for a rank on another
#      node): rank 0's collective times out after distributed_timeout_seconds (3 s) naming
#      rank 1, before mpirun's SIGKILL (odls_base_sigkill_timeout, run_mpi_test.sh).
#
# After each: no step folder but step_2 and step_4, no temporary of an atomic write, LATEST =
# step_4. Then the checkpoint of run 1 resumes at world size 1 (global batch 64, as 2 x 32):
# step 5's loss within 1e-6 of the 2-rank run's, the run finishes its 10 steps.
#
# Usage (Bazel passes these): distributed_kill_test.sh RUN_MPI_TEST RECIPE
set -uo pipefail
runner="$1"
recipe="$2"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fail=0
check() { if ! eval "$1"; then echo "FAIL: $2" >&2; fail=1; fi; }

common=(--config demo/full_finetune_distributed max_steps_per_epoch=10 save_every_n_steps=2
        log_every_n_steps=5 distributed_timeout_seconds=3)

# Leaves only LATEST (step_4), logs/, step_2/ and step_4/, both complete, no temporaries.
check_output_dir() {
  local out="$1" what="$2"
  check '[[ "$(cat "$out/LATEST" 2>/dev/null)" == step_4 ]]' "$what: LATEST is not step_4"
  local entries
  entries="$(cd "$out" && ls -A | tr '\n' ' ')"
  check '[[ "$entries" == "LATEST logs step_2 step_4 " ]]' \
    "$what: $out holds \"$entries\" (a partial checkpoint left?)"
  local temps
  temps="$(find "$out" -name '.*.tmp.*')"
  check '[[ -z "$temps" ]]' "$what: temporaries of atomic writes left: $temps"
  for d in step_2 step_4; do
    check '[[ -f "$out/$d/recipe_state.safetensors" && -f "$out/$d/config.json" ]]' \
      "$what: $out/$d is not complete"
    check '[[ -f "$out/$d/optimizer_shard_0_of_2.safetensors" && -f "$out/$d/optimizer_shard_1_of_2.safetensors" ]]' \
      "$what: $out/$d lacks an optimizer shard"
  done
}

# 1. Killed after step 5.
out1="$tmp/killed_after_step"
rm -rf "$out1"
CCTUNE_TEST_SIGKILL_AT_STEP=1:5 "$runner" --np=2 --expect_failure --max_seconds=25 \
  '--expect_output=SIGKILL after step 5' \
  '--expect_output=full_finetune_distributed: [a-z_]+ #[0-9]+ \([^)]*\) on rank 0: rank 1 \(pid [0-9]+ on this node\) died: killed or crashed' \
  '--expect_output=(process rank 1 with PID [0-9]+ on node [^ ]+ exited on signal 9|1 process returned|processes exited with non-zero status)' \
  "$recipe" "${common[@]}" output_dir="$out1" || fail=1
check_output_dir "$out1" "killed after step 5"

# 2. Killed inside the save of step 6.
out2="$tmp/killed_in_save"
rm -rf "$out2"
CCTUNE_TEST_SIGKILL_AT_STEP=1:6:save "$runner" --np=2 --expect_failure --max_seconds=25 \
  '--expect_output=SIGKILL in the save after step 6' \
  '--expect_output=saving checkpoint [^ ]*/step_6 at step 6 failed: barrier #[0-9]+ on rank 0: rank 1 \(pid [0-9]+ on this node\) died.*the last good checkpoint is [^ ]*/step_4 \(LATEST still names it\)' \
  "$recipe" "${common[@]}" output_dir="$out2" || fail=1
check_output_dir "$out2" "killed in the save of step 6"

# 3. Killed after step 5, found by the timeout alone. mpirun ends the survivors when a rank dies
# (SIGTERM, which the recipe takes as "stop after this step", then SIGKILL after
# odls_base_sigkill_timeout, 1 s by default, mpirun sleeping for it twice): 5 s here, so the
# 3 s timeout comes first.
out3="$tmp/killed_timeout"
rm -rf "$out3"
OMPI_MCA_odls_base_sigkill_timeout=5 CCTUNE_MPI_WATCH_PEERS=0 CCTUNE_TEST_SIGKILL_AT_STEP=1:5 "$runner" --np=2 --expect_failure \
  --max_seconds=25 \
  '--expect_output=full_finetune_distributed: [a-z_]+ #[0-9]+ \([^)]*\) on rank 0 timed out after 3 s: no word from rank 1' \
  "$recipe" "${common[@]}" output_dir="$out3" || fail=1
check_output_dir "$out3" "killed after step 5 (timeout)"

# The uninterrupted 2-rank run, for reference.
ref="$tmp/uninterrupted"
rm -rf "$ref"
"$runner" --np=2 "$recipe" "${common[@]}" output_dir="$ref" >"$tmp/ref.log" 2>&1 || {
  cat "$tmp/ref.log"; echo "FAIL: the uninterrupted run failed" >&2; fail=1; }

# Resume run 1's checkpoint at world size 1 (no launcher): the same global batch.
log="$tmp/resume.log"
OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$recipe" "${common[@]}" output_dir="$out1" \
  batch_size=64 resume_from_checkpoint=true >"$log" 2>&1
rc=$?
cat "$log"
check '[[ $rc == 0 ]]' "the resumed run exited $rc"
check 'grep -q "Resumed from .*/step_4 at step 4" "$log"' "the resumed run did not start at step_4"
check '[[ "$(cat "$out1/LATEST")" == step_10 ]]' "the resumed run did not reach step_10"
# (The killed run logged nothing: its step-5 log needs rank 1, dead by then.)
check 'python3 - "$out1/logs/metrics.jsonl" "$ref/logs/metrics.jsonl" <<EOF
import json, sys
def losses(path):
    return {r["step"]: r["loss"] for r in map(json.loads, filter(str.strip, open(path)))}
resumed, ref = losses(sys.argv[1]), losses(sys.argv[2])
assert sorted(resumed) == [5, 10] and sorted(ref) == [5, 10], (resumed, ref)
for step in (5, 10):
    rel = abs(resumed[step] - ref[step]) / abs(ref[step])
    print("step %d loss: uninterrupted 2 ranks %.9f, killed and resumed at 1 rank %.9f (rel %.2g)"
          % (step, ref[step], resumed[step], rel))
    assert rel < 1e-6, rel
EOF' "the resumed run does not continue the killed one"

if [[ $fail == 0 ]]; then echo "PASS"; fi
exit $fail
