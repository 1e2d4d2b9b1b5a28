// The process-wide MPI runtime: MPI_Init_thread once per process (the first MPI process group,
// or the NCCL backend's bootstrap, starts it), MPI_Finalize at exit. Every MPI call of cctune
// goes through Lock(), so MPI_THREAD_SERIALIZED is all it asks of the library (each group's
// collectives run on a worker thread of its own, distributed/mpi_process_group.cc).
//
// A process whose collective failed (timeout, lost rank, MPI error) is marked with MarkFailed:
// at exit it skips MPI_Finalize, which would wait for the ranks that are gone or stuck, so it
// exits at once with main's status and mpirun then ends the other ranks.
//
// Shared memory between the ranks of a node: Open MPI's vader transport copies a large message
// once, straight from the sender's memory, with Linux's cross-memory attach (CMA,
// process_vm_readv), or, without it, twice through a shared buffer, fragment by fragment, each
// fragment waiting for both sides to poll (measured here: a 64 MB all-gather over 2 ranks
// 87 ms without, 11.5 ms with). Open MPI takes CMA by default and aborts at the first large
// message where the kernel forbids it (containers without CAP_SYS_PTRACE, Yama's
// ptrace_scope >= 1). So before MPI_Init, unless the user set
// OMPI_MCA_btl_vader_single_copy_mechanism, the runtime probes CMA (a forked child's memory
// read with process_vm_readv, and ptrace_scope) and sets the variable to "cma" or "none".
#ifndef CCTUNE_DISTRIBUTED_MPI_RUNTIME_H_
#define CCTUNE_DISTRIBUTED_MPI_RUNTIME_H_

#include <mpi.h>

#include <mutex>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace cctune {

class MpiRuntime {
 public:
  // The runtime, started on the first call (MPI_Init_thread asking for
  // MPI_THREAD_SERIALIZED; FailedPrecondition when the library offers less, or when MPI was
  // finalized already). Thread-safe.
  static absl::StatusOr<MpiRuntime*> Get();

  // Held around every MPI call.
  std::unique_lock<std::timed_mutex> Lock() { return std::unique_lock<std::timed_mutex>(mu_); }

  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  // The thread level the library granted (MPI_THREAD_SERIALIZED or MPI_THREAD_MULTIPLE).
  int thread_level() const { return thread_level_; }
  // How vader copies between the ranks of a node, for the logs: "cma (single copy)",
  // "none (copy in/out: <why CMA is not used>)" or "<value> (OMPI_MCA_btl_vader_single_copy_
  // mechanism, set by the user)"; "" when MPI was initialised by someone else.
  const std::string& shared_memory_copy() const { return shared_memory_copy_; }

  // After a failed collective: skip MPI_Finalize at exit (see above).
  void MarkFailed();
  bool failed() const;

  // Ends every rank of the run: prints `why` to stderr and calls MPI_Abort (mpirun then kills
  // the other ranks and exits with `exit_code`).
  [[noreturn]] void Abort(const std::string& why, int exit_code);

 private:
  MpiRuntime() = default;
  static void FinalizeAtExit();

  std::timed_mutex mu_;
  int world_rank_ = 0;
  int world_size_ = 1;
  int thread_level_ = 0;
  bool owns_init_ = false;  // false when someone else called MPI_Init
  std::string shared_memory_copy_;
};

// Why cross-memory attach cannot be used by this process ("" when it can): Yama's ptrace_scope
// (from `yama_ptrace_scope_path`, absent: no Yama) above 0, or process_vm_readv of a forked
// child's memory failing (errno named). Forks once; safe before MPI_Init.
std::string CmaBlocker(const char* yama_ptrace_scope_path = "/proc/sys/kernel/yama/ptrace_scope");

// Sets OMPI_MCA_btl_vader_single_copy_mechanism (unless set) from CmaBlocker(), and returns the
// description shared_memory_copy() gives. Called by Get() before MPI_Init.
std::string ConfigureSharedMemoryCopy();

// "MPI_ERR_TRUNCATE: message truncated" for an MPI error code.
std::string MpiErrorString(int code);

}  // namespace cctune

#endif  // CCTUNE_DISTRIBUTED_MPI_RUNTIME_H_
