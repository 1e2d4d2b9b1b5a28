// Collective bandwidth of a process group, as nccl-tests reports it: per message size, the
// time of one collective (the slowest rank's mean), algbw = bytes / time and busbw, the link
// traffic a ring would need (all-reduce 2(N-1)/N x algbw; all-gather and reduce-scatter
// (N-1)/N x algbw of the full buffer; broadcast 1x). Run it under mpirun (not a test):
//
//   bazel build //benchmarks:collective_bench
//   BIN=bazel-bin/benchmarks/collective_bench
//   mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 $BIN [flags]
// with flags [--backend mpi|nccl] [--max_mb 64] [--seconds 0.2]
//
// On the mpi backend each size also runs OpenMPI's own MPI_Allreduce (sum, f32) on the same
// buffer, as a reference for the cost of cctune's design (handshake, worker thread, rank-order
// reduction): the "vs MPI_Allreduce" column is cctune's time over MPI's.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>

#include "core/status.h"
#include "core/tensor.h"
#include "distributed/mpi_runtime.h"
#include "distributed/process_group.h"

namespace cctune {
namespace {

using Clock = std::chrono::steady_clock;

// Mean seconds per call of `op` over at least `seconds` (and 3 calls), the slowest rank's.
double TimeIt(ProcessGroup& pg, double seconds, const std::function<absl::Status()>& op) {
  CCTUNE_CHECK_OK(op());  // warm-up
  CCTUNE_CHECK_OK(pg.Barrier());
  int iters = 0;
  const auto start = Clock::now();
  double elapsed = 0;
  // Every rank runs the same count: rank 0's decision is broadcast each round.
  for (;;) {
    for (int i = 0; i < 3; ++i, ++iters) CCTUNE_CHECK_OK(op());
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    auto more = Tensor::Full({1}, elapsed < seconds ? 1 : 0, DType::kI32);
    CCTUNE_CHECK_OK(more);
    CCTUNE_CHECK_OK(pg.Broadcast(*more, 0));
    if (more->data<int32_t>()[0] == 0) break;
  }
  auto t = Tensor::Full({1}, elapsed / iters, DType::kF32);
  CCTUNE_CHECK_OK(t);
  CCTUNE_CHECK_OK(pg.AllReduce(*t, ReduceOp::kMax));
  return t->data<float>()[0];
}

int Main(int argc, char** argv) {
  std::string backend = "mpi";
  double max_mb = 64, seconds = 0.2;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--backend") backend = argv[i + 1];
    else if (flag == "--max_mb") max_mb = std::atof(argv[i + 1]);
    else if (flag == "--seconds") seconds = std::atof(argv[i + 1]);
    else {
      std::fprintf(stderr, "collective_bench: unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  auto env = ReadDistributedEnv();
  CCTUNE_CHECK_OK(env);
  ProcessGroupOptions options;
  options.backend = backend;
  options.timeout_seconds = 120;
  const Device device = backend == "nccl" ? Device::Cuda(env->local_rank) : Device::Cpu();
  auto group = CreateProcessGroup(*env, options, device);
  if (!group.ok()) {
    std::fprintf(stderr, "collective_bench: %s\n", group.status().ToString().c_str());
    return 1;
  }
  ProcessGroup& pg = **group;
  const int n = pg.world_size();
  const bool mpi = backend == "mpi";
  if (pg.rank() == 0) {
    std::printf("# %s backend, %d ranks, f32; times in us, bandwidths in GB/s (1e9 B/s)\n",
                pg.backend(), n);
    std::printf("%12s %10s %10s %10s %10s %10s %10s %10s %12s\n", "bytes", "ar_us",
                "ar_busbw", "ag_us", "ag_busbw", "rs_us", "rs_busbw", "bc_busbw",
                mpi ? "ar/MPI_ar" : "");
  }
  for (double bytes = 1024; bytes <= max_mb * 1048576; bytes *= 4) {
    const int64_t count = static_cast<int64_t>(bytes) / 4 / n * n;  // divisible by n
    const double full = count * 4.0;
    auto buf = Tensor::Full({count}, 1.0, DType::kF32, device);
    auto chunk = Tensor::Full({count / n}, 1.0, DType::kF32, device);
    CCTUNE_CHECK_OK(buf);
    CCTUNE_CHECK_OK(chunk);
    const double ar = TimeIt(pg, seconds, [&] { return pg.AllReduce(*buf, ReduceOp::kSum); });
    const double ag = TimeIt(pg, seconds, [&] { return pg.AllGather(*chunk, *buf); });
    const double rs =
        TimeIt(pg, seconds, [&] { return pg.ReduceScatter(*buf, *chunk, ReduceOp::kSum); });
    const double bc = TimeIt(pg, seconds, [&] { return pg.Broadcast(*buf, 0); });
    double ratio = 0;
    if (mpi) {
      auto rt = MpiRuntime::Get();
      CCTUNE_CHECK_OK(rt);
      const double raw = TimeIt(pg, seconds, [&] {
        auto lock = (*rt)->Lock();  // the group's worker is idle between collectives
        MPI_Allreduce(MPI_IN_PLACE, buf->raw_data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                      MPI_COMM_WORLD);
        return absl::OkStatus();
      });
      ratio = ar / raw;
    }
    const double f = static_cast<double>(n - 1) / n;
    if (pg.rank() == 0) {
      std::printf("%12.0f %10.1f %10.3f %10.1f %10.3f %10.1f %10.3f %10.3f", full, ar * 1e6,
                  full / ar * 2 * f / 1e9, ag * 1e6, full / ag * f / 1e9, rs * 1e6,
                  full / rs * f / 1e9, full / bc / 1e9);
      if (mpi) std::printf(" %12.2f", ratio);
      std::printf("\n");
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace
}  // namespace cctune

int main(int argc, char** argv) { return cctune::Main(argc, argv); }
