#include "distributed/mpi_runtime.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace cctune {
namespace {

std::atomic<bool> g_failed{false};
std::atomic<MpiRuntime*> g_runtime{nullptr};

}  // namespace

std::string MpiErrorString(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return absl::StrCat("MPI error ", code);
  return absl::StrCat("MPI error ", code, ": ", std::string(text, len));
}

absl::StatusOr<MpiRuntime*> MpiRuntime::Get() {
  static std::mutex init_mu;
  std::lock_guard<std::mutex> lock(init_mu);
  if (MpiRuntime* rt = g_runtime.load()) return rt;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) {
    return absl::FailedPreconditionError("MPI was finalized already: no MPI process group now");
  }
  auto* rt = new MpiRuntime;  // lives until exit (FinalizeAtExit uses it)
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) {
    MPI_Query_thread(&rt->thread_level_);
  } else {
    int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &rt->thread_level_);
    if (rc != MPI_SUCCESS) {
      delete rt;
      return absl::UnavailableError(absl::StrCat("MPI_Init_thread failed: ", MpiErrorString(rc)));
    }
    rt->owns_init_ = true;
  }
  if (rt->thread_level_ < MPI_THREAD_SERIALIZED) {
    // Leave the runtime as it is: it is of no use to us, and finalizing it here would stop
    // whoever initialised it.
    const int level = rt->thread_level_;
    delete rt;
    return absl::FailedPreconditionError(absl::StrCat(
        "the MPI library grants thread level ", level,
        ", below MPI_THREAD_SERIALIZED: the process group runs its collectives on a worker "
        "thread"));
  }
  // Errors come back as codes (the backends turn them into Status), not as an abort.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &rt->world_rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &rt->world_size_);
  if (rt->owns_init_) std::atexit(&MpiRuntime::FinalizeAtExit);
  g_runtime.store(rt);
  return rt;
}

void MpiRuntime::MarkFailed() { g_failed.store(true); }
bool MpiRuntime::failed() const { return g_failed.load(); }

void MpiRuntime::FinalizeAtExit() {
  MpiRuntime* rt = g_runtime.load();
  if (rt == nullptr || g_failed.load()) return;
  auto lock = rt->Lock();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

void MpiRuntime::Abort(const std::string& why, int exit_code) {
  std::fprintf(stderr, "cctune: rank %d of %d: %s; aborting the run\n", world_rank_, world_size_,
               why.c_str());
  std::fflush(stderr);
  std::fflush(stdout);
  MarkFailed();
  // The lock if it comes within a second (MPI_THREAD_SERIALIZED); a worker thread stuck in a
  // call that holds it must not keep the run alive.
  std::unique_lock<std::timed_mutex> lock(mu_, std::defer_lock);
  (void)lock.try_lock_for(std::chrono::seconds(1));
  MPI_Abort(MPI_COMM_WORLD, exit_code == 0 ? 1 : exit_code);
  std::_Exit(exit_code == 0 ? 1 : exit_code);
}

}  // namespace cctune
