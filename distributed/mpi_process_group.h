// The "mpi" process group: OpenMPI collectives on CPU tensors (f32, bf16, f16, i32, i64).
//
// Linking :mpi_process_group registers the backend (alwayslink); CreateProcessGroup then
// serves backend "mpi" (and "auto" for a CPU device and a world above one). MPI starts once
// per process (distributed/mpi_runtime.h). Groups must be created in the same order on every
// rank (each duplicates MPI_COMM_WORLD, a collective).
//
// How a collective runs. Each group has one worker thread that runs its collectives in the
// order they were called (so Start* really overlaps: the worker drives MPI's progress while
// the caller computes). A collective is two phases, both under one deadline of
// ProcessGroupOptions::timeout_seconds:
//  1. Handshake: the rank sends a 32-byte arrival record (sequence number, collective, dtype,
//     element count, op or root) to every other rank on a side communicator and receives
//     theirs. It is what names the lost ranks: on timeout, the ranks whose record did not come
//     are the ones "not heard from". A record that differs (another collective, count or
//     dtype) is FailedPrecondition naming both calls, before any data moves. Cost: 2(N-1)
//     eager messages of 32 bytes per collective, a few microseconds; a barrier is this phase
//     alone.
//  2. Data: nonblocking MPI (MPI_Ialltoallv / MPI_Ialltoall / MPI_Iallgather(v) / MPI_Ibcast)
//     polled with MPI_Test until done or the deadline. Reductions do not use MPI_Op: each rank
//     receives every rank's copy of the chunk it owns and reduces it in rank order
//     (distributed/local_reduce.h), so all-reduce is a reduce-scatter by all-to-all followed
//     by an all-gather, the bandwidth of a ring, and its result is bit-identical across runs
//     and ranks.
//
// Failures: DeadlineExceeded names the collective, its sequence number, element count, dtype
// and the ranks not heard from; an MPI error is Unavailable with MPI's text. After a failure
// the group is broken (every later collective fails at once with the first error). After a
// timeout or an MPI error, the buffers of the failed collective hold undefined data and stay
// allocated (MPI may still write them), and the process skips MPI_Finalize at exit (a rank
// whose collective failed exits with main's status; mpirun then stops the others). A mismatch
// leaves no request behind: the other groups go on and MPI_Finalize runs. AbortRun
// (process_group.h) ends every rank at once.
#ifndef CCTUNE_DISTRIBUTED_MPI_PROCESS_GROUP_H_
#define CCTUNE_DISTRIBUTED_MPI_PROCESS_GROUP_H_

#include <memory>

#include "absl/status/statusor.h"
#include "distributed/process_group.h"

namespace cctune {

// The MPI group of `env` (its world size must match MPI_COMM_WORLD's: InvalidArgument naming
// both, e.g. torchrun variables in a process that mpirun did not start).
absl::StatusOr<std::unique_ptr<ProcessGroup>> CreateMpiProcessGroup(
    const DistributedEnv& env, const ProcessGroupOptions& options);

}  // namespace cctune

#endif  // CCTUNE_DISTRIBUTED_MPI_PROCESS_GROUP_H_
