// Collectives across the ranks of a distributed run, on Tensors.
//
//   CCTUNE_ASSIGN_OR_RETURN(DistributedEnv env, ReadDistributedEnv());
//   CCTUNE_ASSIGN_OR_RETURN(std::unique_ptr<ProcessGroup> pg, CreateProcessGroup(env, options));
//   CCTUNE_RETURN_IF_ERROR(pg->AllReduce(loss, ReduceOp::kAvg));
//
// Backends: "single" (a world of one: every collective is the identity, so a distributed
// recipe run without a launcher is the single-device run), "mpi" (OpenMPI, CPU tensors) and
// "nccl" (CUDA tensors; its ncclUniqueId travels over MPI). A collective never hangs: it
// fails after ProcessGroupOptions::timeout_seconds with DeadlineExceeded naming the operation and
// the ranks not heard from, and a lost rank is Unavailable naming it (distributed/README in
// docs/distributed.md).
//
// Buffers: every tensor is contiguous, on the group's device, and every rank passes the same
// dtype and element counts. A chunked collective works on flat element ranges: chunk r of a
// tensor of world_size()*n elements is elements [r*n, (r+1)*n).
#ifndef CCTUNE_DISTRIBUTED_PROCESS_GROUP_H_
#define CCTUNE_DISTRIBUTED_PROCESS_GROUP_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"

namespace cctune {

enum class ReduceOp { kSum, kAvg, kMax };
const char* ReduceOpName(ReduceOp op);

// Where this process stands in the run, from the launcher's environment.
struct DistributedEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;        // rank among the processes on this host
  int local_world_size = 1;  // processes on this host
  // Which variables it came from: "OpenMPI", "Slurm", "torchrun", or "none" (not launched:
  // a world of one).
  std::string source = "none";
};

// Reads OpenMPI's (OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK / _LOCAL_SIZE), then torchrun's
// (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE), then Slurm's (SLURM_PROCID, SLURM_NTASKS,
// SLURM_LOCALID, SLURM_NTASKS_PER_NODE) variables; none of them set is a world of one.
// InvalidArgument naming the variable and its value when one is not a number or the ranks
// are inconsistent (rank >= world size, ...). `getenv` is for tests.
absl::StatusOr<DistributedEnv> ReadDistributedEnv(
    const std::function<const char*(const char*)>& getenv = nullptr);

struct ProcessGroupOptions {
  // "auto": "single" for a world of one, "nccl" for a cuda device, else "mpi".
  std::string backend = "auto";
  // Every collective fails after this many seconds (the `distributed_timeout_seconds`
  // config key).
  double timeout_seconds = 300;
  // The device of the group's tensors (the "nccl" backend's GPU). CreateProcessGroup sets it
  // from its `device` argument.
  Device device = Device::Cpu();
};

// A collective in flight (overlap: start the next layer's all-gather, compute, then Wait).
class Work {
 public:
  virtual ~Work() = default;
  // Blocks until done or the group's timeout; the collective's error.
  virtual absl::Status Wait() = 0;
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual const char* backend() const = 0;
  // How the backend moves data, for the logs ("" when there is nothing to say); the MPI one:
  // "shared memory: cma (single copy)" (MpiRuntime::shared_memory_copy()).
  virtual std::string transport() const { return ""; }

  // `t` becomes op over every rank's `t`.
  virtual absl::Status AllReduce(Tensor& t, ReduceOp op) = 0;
  // `output` (n elements) becomes op over every rank's chunk rank() of `input`
  // (world_size()*n elements).
  virtual absl::Status ReduceScatter(const Tensor& input, Tensor& output, ReduceOp op) = 0;
  // Chunk r of `output` (world_size()*n elements) becomes rank r's `input` (n elements).
  virtual absl::Status AllGather(const Tensor& input, Tensor& output) = 0;
  // `t` becomes rank `root`'s `t`.
  virtual absl::Status Broadcast(Tensor& t, int root) = 0;
  virtual absl::Status Barrier() = 0;

  // The same collectives, started: the buffers must stay alive and untouched until Wait.
  // The default runs them at once and returns a finished Work.
  virtual absl::StatusOr<std::unique_ptr<Work>> StartAllGather(const Tensor& input,
                                                               Tensor& output);
  virtual absl::StatusOr<std::unique_ptr<Work>> StartReduceScatter(const Tensor& input,
                                                                   Tensor& output, ReduceOp op);

  // Ends this process and every other rank of the run now, after printing `status` to stderr
  // with this rank's number; does not return. The default exits with status 1 (a world of
  // one); the MPI backend calls MPI_Abort (mpirun then kills the other ranks).
  [[noreturn]] virtual void Abort(const absl::Status& status) const;
};

// For recipes, after a failed collective: `AbortRun(*pg, status)` ends every rank at once,
// exit status 1. Returning the error from main works too: a process whose collective failed
// skips MPI_Finalize at exit (it would wait for the lost rank), so it exits non-zero and
// mpirun stops the others (docs/distributed.md, "Failures").
[[noreturn]] void AbortRun(const ProcessGroup& pg, const absl::Status& status);

// A world of one: every collective copies or keeps its input.
std::unique_ptr<ProcessGroup> CreateSingleProcessGroup();

// The group of `env` with `options.backend`. Unimplemented, naming the backend, when this
// build lacks it; a world of one is always "single" unless a backend is named. "nccl" opens
// libcctune_nccl.so first (distributed/nccl_process_group.h): Unavailable naming the places
// tried and dlerror (e.g. no libnccl.so.2) when it cannot.
using ProcessGroupFactory = std::function<absl::StatusOr<std::unique_ptr<ProcessGroup>>(
    const DistributedEnv& env, const ProcessGroupOptions& options)>;
// Backends register themselves (from a static initialiser in their library).
void RegisterProcessGroupBackend(const std::string& name, ProcessGroupFactory factory);
absl::StatusOr<std::unique_ptr<ProcessGroup>> CreateProcessGroup(
    const DistributedEnv& env, const ProcessGroupOptions& options, const Device& device);

}  // namespace cctune

#endif  // CCTUNE_DISTRIBUTED_PROCESS_GROUP_H_
