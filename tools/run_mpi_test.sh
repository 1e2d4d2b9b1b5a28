#!/usr/bin/env bash
# Runs a test program on N ranks under mpirun: the runner of cctune_mpi_test
# (tools/build_defs.bzl); also usable by hand.
#
#   run_mpi_test.sh --np=2 [--expect_failure | --expect_status=N] [--expect_output=REGEX]... \
#     [--expect_lines=N:REGEX]... [--max_seconds=S] [--launcher] PROGRAM [ARGS...]
#
# --launcher: PROGRAM starts mpirun itself (`cctune run --nproc_per_node N`); it runs as is,
# in the same environment. --expect_lines=N:REGEX: exactly N output lines match REGEX.
# Passes when mpirun exits 0 (or, with --expect_failure, non-zero; with --expect_status, N), every --expect_output
# extended regex matches the ranks' combined output and the run took at most --max_seconds.
# One thread per rank (OMP_NUM_THREADS=1, OPENBLAS_NUM_THREADS=1). Made for Bazel's sandbox
# and a container: a short session folder under /tmp (OpenMPI's unix sockets allow 108-byte
# paths; $TEST_TMPDIR is longer), shared memory without CMA (ptrace is often forbidden), the
# local node only (plm isolated, even inside a Slurm allocation), no binding to cores.
set -uo pipefail

np=2
expect_failure=0
expect_status=""
max_seconds=0
patterns=()
line_counts=()
launcher=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --np=*) np="${1#*=}" ;;
    --expect_failure) expect_failure=1 ;;
    --expect_status=*) expect_status="${1#*=}"; expect_failure=1 ;;
    --expect_output=*) patterns+=("${1#*=}") ;;
    --expect_lines=*) line_counts+=("${1#*=}") ;;
    --max_seconds=*) max_seconds="${1#*=}" ;;
    --launcher) launcher=1 ;;
    --) shift; break ;;
    -*) echo "run_mpi_test.sh: unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
  shift
done
[[ $# -ge 1 ]] || { echo "usage: run_mpi_test.sh --np=N [options] PROGRAM [ARGS...]" >&2; exit 2; }
program="$1"
shift

if ! command -v mpirun >/dev/null 2>&1; then
  echo "run_mpi_test.sh: mpirun not found: install the openmpi-bin package (tools/setup.sh)" >&2
  exit 1
fi

session="$(mktemp -d /tmp/cctune-mpi.XXXXXX)"
trap 'rm -rf "$session"' EXIT
export TMPDIR="$session"
export OMPI_MCA_orte_tmpdir_base="$session"
export OMPI_MCA_btl=self,vader
# vader's single-copy mechanism is left to the program: cctune's MPI runtime probes CMA before
# MPI_Init and picks cma or none (distributed/mpi_runtime.h); an exported value wins.
export OMPI_MCA_plm=isolated
export OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_hwloc_base_binding_policy=none
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
# Bazel's per-test files would be written by every rank at once: the exit status decides.
unset XML_OUTPUT_FILE GTEST_OUTPUT TEST_PREMATURE_EXIT_FILE

flags=(--oversubscribe --bind-to none -np "$np")
if [[ "$(id -u)" == 0 ]]; then flags=(--allow-run-as-root "${flags[@]}"); fi
# A safety net below Bazel's own limit: mpirun kills the job and says so.
if [[ -n "${TEST_TIMEOUT:-}" && "$TEST_TIMEOUT" -gt 20 ]]; then
  flags+=(--timeout $((TEST_TIMEOUT - 10)))
fi

log="$session/output.log"
start=$SECONDS
if [[ $launcher == 1 ]]; then
  echo "run_mpi_test.sh: $program $*"
  "$program" "$@" 2>&1 | tee "$log"
else
  echo "run_mpi_test.sh: mpirun ${flags[*]} $program $*"
  mpirun "${flags[@]}" "$program" "$@" 2>&1 | tee "$log"
fi
rc=${PIPESTATUS[0]}
elapsed=$((SECONDS - start))
echo "run_mpi_test.sh: exit status $rc after ${elapsed} s"

status=0
if [[ -n $expect_status ]]; then
  if [[ $rc != "$expect_status" ]]; then echo "FAIL: expected exit status $expect_status" >&2; status=1; fi
elif [[ $expect_failure == 1 ]]; then
  if [[ $rc == 0 ]]; then echo "FAIL: expected a non-zero exit status" >&2; status=1; fi
elif [[ $rc != 0 ]]; then
  echo "FAIL: mpirun exited $rc" >&2
  status=1
fi
for p in "${patterns[@]}"; do
  if ! grep -Eq -- "$p" "$log"; then
    echo "FAIL: the output does not match /$p/" >&2
    status=1
  fi
done
for spec in "${line_counts[@]}"; do
  want="${spec%%:*}"
  got=$(grep -cE -- "${spec#*:}" "$log" || true)
  if [[ "$got" != "$want" ]]; then
    echo "FAIL: $got output lines match /${spec#*:}/, expected $want" >&2
    status=1
  fi
done
if [[ $max_seconds -gt 0 && $elapsed -gt $max_seconds ]]; then
  echo "FAIL: took ${elapsed} s, more than ${max_seconds} s" >&2
  status=1
fi
exit $status
