#include "distributed/process_group.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/backend_library.h"
#include "core/device_interface.h"
#include "core/status.h"

namespace cctune {

const char* ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAvg:
      return "avg";
    case ReduceOp::kMax:
      return "max";
  }
  return "?";
}

namespace {

// One launcher's variables, in DistributedEnv's order.
struct EnvNames {
  const char* source;
  const char* rank;
  const char* world_size;
  const char* local_rank;
  const char* local_world_size;
};

constexpr EnvNames kLaunchers[] = {
    {"OpenMPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"},
};

absl::StatusOr<std::optional<int>> ReadInt(const std::function<const char*(const char*)>& get,
                                           const char* name) {
  const char* v = get(name);
  if (v == nullptr || *v == '\0') return std::optional<int>();
  int out = 0;
  // Slurm writes SLURM_NTASKS_PER_NODE as "2(x3)" on uneven allocations: the first count.
  std::string text(v);
  if (std::string(name) == "SLURM_NTASKS_PER_NODE") text = text.substr(0, text.find('('));
  if (!absl::SimpleAtoi(text, &out) || out < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("environment variable ", name, "=\"", v, "\" is not a non-negative integer"));
  }
  return std::optional<int>(out);
}

std::mutex& RegistryMutex() {
  static std::mutex* const mu = new std::mutex;
  return *mu;
}
std::map<std::string, ProcessGroupFactory>& Registry() {
  static auto* const registry = new std::map<std::string, ProcessGroupFactory>;
  return *registry;
}

// A world of one.
class SingleProcessGroup final : public ProcessGroup {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  const char* backend() const override { return "single"; }

  absl::Status AllReduce(Tensor& t, ReduceOp op) override { return CheckContiguous("all_reduce", t); }
  absl::Status ReduceScatter(const Tensor& input, Tensor& output, ReduceOp op) override {
    return Copy("reduce_scatter", input, output);
  }
  absl::Status AllGather(const Tensor& input, Tensor& output) override {
    return Copy("all_gather", input, output);
  }
  absl::Status Broadcast(Tensor& t, int root) override {
    if (root != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("broadcast: root rank ", root, " is not in a world of 1"));
    }
    return CheckContiguous("broadcast", t);
  }
  absl::Status Barrier() override { return absl::OkStatus(); }

 private:
  static absl::Status CheckContiguous(const char* op, const Tensor& t) {
    if (!t.defined() || !t.is_contiguous()) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": the tensor must be defined and contiguous"));
    }
    return absl::OkStatus();
  }
  static absl::Status Copy(const char* op, const Tensor& input, Tensor& output) {
    CCTUNE_RETURN_IF_ERROR(CheckContiguous(op, input));
    CCTUNE_RETURN_IF_ERROR(CheckContiguous(op, output));
    if (input.numel() != output.numel() || input.dtype() != output.dtype()) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": input has ", input.numel(), " elements of ", DTypeName(input.dtype()),
          ", output ", output.numel(), " of ", DTypeName(output.dtype()), " (world size 1)"));
    }
    if (input.SharesStorageWith(output) && input.offset() == output.offset()) return absl::OkStatus();
    CCTUNE_ASSIGN_OR_RETURN(Tensor flat_out, output.View({output.numel()}));
    CCTUNE_ASSIGN_OR_RETURN(Tensor flat_in, input.View({input.numel()}));
    return flat_out.CopyFrom(flat_in);
  }
};

class DoneWork final : public Work {
 public:
  explicit DoneWork(absl::Status status) : status_(std::move(status)) {}
  absl::Status Wait() override { return status_; }

 private:
  absl::Status status_;
};

// libcctune_nccl.so registers "nccl" when opened (once per process).
absl::Status LoadNcclLibrary() {
  static const absl::Status* const status = [] {
    // The CUDA backend first (linked in, or libcctune_cuda.so): the tensors live on it.
    auto cuda = GetDeviceInterface(DeviceType::kCUDA);
    if (!cuda.ok()) return new absl::Status(cuda.status());
    absl::Status opened =
        OpenLibrary(LibraryCandidates("libcctune_nccl.so", "distributed", "CCTUNE_NCCL_LIBRARY"));
    if (opened.ok()) return new absl::Status();
    return new absl::Status(absl::UnavailableError(absl::StrCat(
        "process group backend \"nccl\" needs libcctune_nccl.so and the NCCL library it links "
        "(libnccl.so.2), but it could not be loaded: ",
        opened.message(),
        ". Set CCTUNE_NCCL_LIBRARY to its path (bazel build //distributed:libcctune_nccl.so), "
        "or add NCCL's folder to LD_LIBRARY_PATH")));
  }();
  return *status;
}

}  // namespace

absl::StatusOr<DistributedEnv> ReadDistributedEnv(
    const std::function<const char*(const char*)>& getenv_fn) {
  const std::function<const char*(const char*)> get =
      getenv_fn ? getenv_fn : [](const char* name) -> const char* { return std::getenv(name); };
  for (const EnvNames& names : kLaunchers) {
    CCTUNE_ASSIGN_OR_RETURN(std::optional<int> rank, ReadInt(get, names.rank));
    CCTUNE_ASSIGN_OR_RETURN(std::optional<int> world, ReadInt(get, names.world_size));
    if (!rank.has_value() && !world.has_value()) continue;
    if (!rank.has_value() || !world.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          names.source, " launch: ", rank.has_value() ? names.world_size : names.rank,
          " is not set but ", rank.has_value() ? names.rank : names.world_size, " is"));
    }
    DistributedEnv env;
    env.source = names.source;
    env.rank = *rank;
    env.world_size = *world;
    CCTUNE_ASSIGN_OR_RETURN(std::optional<int> local_rank, ReadInt(get, names.local_rank));
    CCTUNE_ASSIGN_OR_RETURN(std::optional<int> local_world, ReadInt(get, names.local_world_size));
    env.local_rank = local_rank.value_or(env.rank);
    env.local_world_size = local_world.value_or(env.world_size);
    if (env.world_size < 1 || env.rank >= env.world_size) {
      return absl::InvalidArgumentError(absl::StrCat(names.source, " launch: ", names.rank, "=",
                                                     env.rank, " is not below ", names.world_size,
                                                     "=", env.world_size));
    }
    if (env.local_world_size < 1 || env.local_rank >= env.local_world_size ||
        env.local_world_size > env.world_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          names.source, " launch: ", names.local_rank, "=", env.local_rank, " and ",
          names.local_world_size, "=", env.local_world_size, " do not fit ", names.world_size,
          "=", env.world_size));
    }
    return env;
  }
  return DistributedEnv{};
}

absl::StatusOr<std::unique_ptr<Work>> ProcessGroup::StartAllGather(const Tensor& input,
                                                                   Tensor& output) {
  return std::unique_ptr<Work>(new DoneWork(AllGather(input, output)));
}

absl::StatusOr<std::unique_ptr<Work>> ProcessGroup::StartReduceScatter(const Tensor& input,
                                                                       Tensor& output,
                                                                       ReduceOp op) {
  return std::unique_ptr<Work>(new DoneWork(ReduceScatter(input, output, op)));
}

void ProcessGroup::Abort(const absl::Status& status) const {
  std::fprintf(stderr, "cctune: rank %d of %d: %s; aborting the run\n", rank(), world_size(),
               status.ToString().c_str());
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(1);
}

void AbortRun(const ProcessGroup& pg, const absl::Status& status) {
  pg.Abort(status);
  std::_Exit(1);  // an override that returned
}

std::unique_ptr<ProcessGroup> CreateSingleProcessGroup() {
  return std::make_unique<SingleProcessGroup>();
}

void RegisterProcessGroupBackend(const std::string& name, ProcessGroupFactory factory) {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  Registry()[name] = std::move(factory);
}

absl::StatusOr<std::unique_ptr<ProcessGroup>> CreateProcessGroup(
    const DistributedEnv& env, const ProcessGroupOptions& options, const Device& device) {
  std::string backend = options.backend;
  if (backend == "auto") {
    backend = env.world_size == 1 ? "single" : device.is_cuda() ? "nccl" : "mpi";
  }
  if (backend == "single") {
    if (env.world_size != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "process group backend \"single\" cannot serve a world of ", env.world_size,
          " (launched by ", env.source, ")"));
    }
    return CreateSingleProcessGroup();
  }
  ProcessGroupFactory factory;
  std::string known = "single";
  auto find = [&] {
    std::lock_guard<std::mutex> lock(RegistryMutex());
    auto it = Registry().find(backend);
    if (it != Registry().end()) factory = it->second;
    known = "single";
    for (const auto& [name, unused] : Registry()) absl::StrAppend(&known, ", ", name);
  };
  find();
  if (!factory && backend == "nccl") {
    CCTUNE_RETURN_IF_ERROR(LoadNcclLibrary());
    find();
  }
  if (!factory) {
    return absl::UnimplementedError(absl::StrCat("process group backend \"", backend,
                                                 "\" is not in this build (it has: ", known, ")"));
  }
  ProcessGroupOptions with_device = options;
  with_device.device = device;
  return factory(env, with_device);
}

}  // namespace cctune
