#include "distributed/mpi_runtime.h"

#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace cctune {
namespace {

std::atomic<bool> g_failed{false};
std::atomic<MpiRuntime*> g_runtime{nullptr};

constexpr char kSingleCopyVar[] = "OMPI_MCA_btl_vader_single_copy_mechanism";

// What the forked child's copy of memory holds; the parent reads it back through CMA.
volatile uint64_t g_cma_probe_word = 0;

}  // namespace

std::string CmaBlocker(const char* yama_ptrace_scope_path) {
  std::ifstream yama(yama_ptrace_scope_path);
  std::string scope;
  if (yama && std::getline(yama, scope)) {
    scope = std::string(absl::StripAsciiWhitespace(scope));
    if (scope != "0") {
      return absl::StrCat("Yama's ptrace_scope is ", scope, " (", yama_ptrace_scope_path,
                          "): sibling processes may not read each other's memory");
    }
  }
  int fds[2];
  if (::pipe(fds) != 0) return absl::StrCat("pipe() failed: ", std::strerror(errno));
  const uint64_t token = 0x636374756e65ull ^ static_cast<uint64_t>(::getpid());
  g_cma_probe_word = token;
  const pid_t child = ::fork();
  if (child < 0) {
    const int err = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    return absl::StrCat("fork() failed: ", std::strerror(err));
  }
  if (child == 0) {  // waits (async-signal-safe calls only) until the parent closes its end
    ::close(fds[1]);
    char c;
    while (::read(fds[0], &c, 1) < 0 && errno == EINTR) {
    }
    ::_exit(0);
  }
  ::close(fds[0]);
  uint64_t got = 0;
  struct iovec local = {&got, sizeof(got)};
  struct iovec remote = {const_cast<uint64_t*>(&g_cma_probe_word), sizeof(got)};
  const ssize_t n = ::process_vm_readv(child, &local, 1, &remote, 1, 0);
  const int err = errno;
  ::close(fds[1]);
  int wstatus = 0;
  while (::waitpid(child, &wstatus, 0) < 0 && errno == EINTR) {
  }
  if (n != static_cast<ssize_t>(sizeof(got))) {
    return absl::StrCat("process_vm_readv of a child process failed: ",
                        n < 0 ? std::strerror(err) : "short read",
                        " (a container without CAP_SYS_PTRACE, or a seccomp filter)");
  }
  if (got != token) return "process_vm_readv of a child process read the wrong bytes";
  return "";
}

std::string ConfigureSharedMemoryCopy() {
  if (const char* set = std::getenv(kSingleCopyVar)) {
    return absl::StrCat(set, " (", kSingleCopyVar, ", set by the user)");
  }
  const std::string blocker = CmaBlocker();
  ::setenv(kSingleCopyVar, blocker.empty() ? "cma" : "none", 0);
  return blocker.empty() ? "cma (single copy)" : absl::StrCat("none (copy in/out: ", blocker, ")");
}

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
    rt->shared_memory_copy_ = ConfigureSharedMemoryCopy();
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
