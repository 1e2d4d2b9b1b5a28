// The "nccl" process group: NCCL collectives on CUDA tensors (f32, bf16, f16, i32, i64).
//
// Built into libcctune_nccl.so, a library of its own that CreateProcessGroup opens (dlopen)
// the first time backend "nccl" is asked for, so that neither the CPU binaries nor the CUDA
// backend library (libcctune_cuda.so) need NCCL (libnccl.so.2, ~200 MB) to be installed. Its
// place is found like the CUDA backend's (core/backend_library.h), or $CCTUNE_NCCL_LIBRARY.
//
// One NCCL communicator per group, on device ProcessGroupOptions::device (cuda:N; recipes pass
// cuda:<local rank>). Bootstrap: rank 0's ncclUniqueId travels over an "mpi" group (its
// broadcast has the MPI backend's timeout and names a missing rank); a world of one needs no
// MPI. The communicator is non-blocking (ncclConfig_t::blocking = 0), so every NCCL call,
// initialisation included, is polled with a deadline and can be aborted.
//
// A collective: the legacy default stream (where every cctune kernel runs) records an event,
// the group's own stream waits for it, NCCL runs there and records a done event, so the
// caller's next kernels overlap with it. Work::Wait polls the done event and
// ncclCommGetAsyncError until done or ProcessGroupOptions::timeout_seconds after the start;
// on an NCCL error or a timeout it calls ncclCommAbort (the group is broken from then on).
// Lost ranks: alongside each collective the host all-gathers a 32-byte record (sequence
// number, collective, count, dtype, op) over the MPI group, asynchronously (the MPI worker
// thread, microseconds). On a timeout that record's own error names the ranks not heard from;
// when it completed, every rank entered the collective and the transfer itself stalled. A
// record that differs is FailedPrecondition naming both calls (found after the fact: NCCL
// itself cannot check).
#ifndef CCTUNE_DISTRIBUTED_NCCL_PROCESS_GROUP_H_
#define CCTUNE_DISTRIBUTED_NCCL_PROCESS_GROUP_H_

#include <memory>

#include "absl/status/statusor.h"
#include "distributed/process_group.h"

namespace cctune {

absl::StatusOr<std::unique_ptr<ProcessGroup>> CreateNcclProcessGroup(
    const DistributedEnv& env, const ProcessGroupOptions& options);

}  // namespace cctune

#endif  // CCTUNE_DISTRIBUTED_NCCL_PROCESS_GROUP_H_
