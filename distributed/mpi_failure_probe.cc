// A program that makes a 2-rank MPI run fail on purpose, for the failure tests of
// distributed/BUILD (run by tools/run_mpi_test.sh, which checks the exit status, the messages
// and the time taken):
//   mpi_failure_probe stall   rank 1 sleeps instead of calling the collective: rank 0's
//                             all_reduce times out after --timeout s naming rank 1, and main
//                             returns the error (exit status 1, no MPI_Finalize)
//   mpi_failure_probe abort   the same, then AbortRun: MPI_Abort ends every rank
//   mpi_failure_probe exit    rank 1 finalizes and returns after the first collective, rank 0
//                             calls a second one: it times out naming rank 1
//   mpi_failure_probe kill    rank 1 kills itself (SIGKILL) in the middle of a loop of
//                             all-reduces; mpirun reports the lost rank and ends the run
//   mpi_failure_probe kill_computing   rank 1 kills itself after the first all-reduce while
//                             rank 0 computes (sleeps) for 10 s: rank 0's process monitor
//                             names rank 1 at once, before mpirun's SIGTERM ends rank 0
// Usage: mpi_failure_probe MODE [timeout_seconds, default 2]
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "core/status.h"
#include "core/tensor.h"
#include "distributed/process_group.h"

namespace cctune {
namespace {

absl::Status Probe(const std::string& mode, double timeout) {
  CCTUNE_ASSIGN_OR_RETURN(DistributedEnv env, ReadDistributedEnv());
  ProcessGroupOptions options;
  options.backend = "mpi";
  options.timeout_seconds = timeout;
  CCTUNE_ASSIGN_OR_RETURN(std::unique_ptr<ProcessGroup> pg,
                          CreateProcessGroup(env, options, Device::Cpu()));
  CCTUNE_ASSIGN_OR_RETURN(Tensor t, Tensor::Full({1000}, 1.0, DType::kF32));
  const auto start = std::chrono::steady_clock::now();
  auto seconds = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  if (mode == "stall" || mode == "abort") {
    if (pg->rank() == 1) {
      std::this_thread::sleep_for(std::chrono::seconds(120));  // mpirun ends it first
      return absl::OkStatus();
    }
    absl::Status s = pg->AllReduce(t, ReduceOp::kSum);
    std::printf("probe: rank 0's all_reduce returned after %.1f s\n", seconds());
    std::fflush(stdout);
    if (s.ok()) return absl::InternalError("probe: the all_reduce succeeded without rank 1");
    if (mode == "abort") AbortRun(*pg, s);
    return s;
  }
  if (mode == "exit") {
    CCTUNE_RETURN_IF_ERROR(pg->AllReduce(t, ReduceOp::kSum));
    if (pg->rank() == 1) return absl::OkStatus();
    return pg->Barrier();
  }
  if (mode == "kill") {
    for (int step = 0; step < 1000; ++step) {
      if (step == 20 && pg->rank() == 1) {
        std::printf("probe: rank 1 kills itself at step %d\n", step);
        std::fflush(stdout);
        kill(getpid(), SIGKILL);
      }
      CCTUNE_RETURN_IF_ERROR(pg->AllReduce(t, ReduceOp::kSum));
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return absl::InternalError("probe: 1000 steps passed without rank 1");
  }
  if (mode == "kill_computing") {
    CCTUNE_RETURN_IF_ERROR(pg->AllReduce(t, ReduceOp::kSum));
    if (pg->rank() == 1) {
      std::printf("probe: rank 1 kills itself after all_reduce #1\n");
      std::fflush(stdout);
      kill(getpid(), SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::seconds(10));  // mpirun ends it first
    return pg->AllReduce(t, ReduceOp::kSum);
  }
  return absl::InvalidArgumentError(absl::StrCat("probe: unknown mode \"", mode,
                                                 "\" (stall, abort, exit, kill, kill_computing)"));
}

}  // namespace
}  // namespace cctune

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: mpi_failure_probe stall|abort|exit|kill [timeout_seconds]\n");
    return 2;
  }
  const double timeout = argc > 2 ? std::atof(argv[2]) : 2.0;
  absl::Status s = cctune::Probe(argv[1], timeout);
  if (!s.ok()) {
    std::fprintf(stderr, "probe: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
