#include "distributed/nccl_process_group.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status.h"
#include "core/tensor.h"
#include "distributed/collective_call.h"

namespace cctune {
namespace {

using Clock = std::chrono::steady_clock;

absl::Status CudaError(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  cudaGetLastError();  // clear the sticky slot for a recoverable error
  return absl::UnavailableError(absl::StrCat(what, ": ", cudaGetErrorString(e), " (",
                                             cudaGetErrorName(e), ")"));
}
#define NCCL_PG_CUDA(expr) CCTUNE_RETURN_IF_ERROR(CudaError((expr), #expr))

std::string NcclText(ncclResult_t r, ncclComm_t comm) {
  std::string s = ncclGetErrorString(r);
  const char* last = comm != nullptr ? ncclGetLastError(comm) : nullptr;
  if (last != nullptr && *last != '\0') absl::StrAppend(&s, " (", last, ")");
  return s;
}

absl::StatusOr<ncclDataType_t> NcclType(DType t) {
  switch (t) {
    case DType::kF32:
      return ncclFloat32;
    case DType::kBF16:
      return ncclBfloat16;
    case DType::kF16:
      return ncclFloat16;
    case DType::kI32:
      return ncclInt32;
    case DType::kI64:
      return ncclInt64;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("nccl: ", DTypeName(t), " tensors are not supported"));
  }
}

ncclRedOp_t NcclOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kAvg:
      return ncclAvg;
    case ReduceOp::kMax:
      return ncclMax;
  }
  return ncclSum;
}

using Kind = CollectiveKind;
// The host-side record of a collective, all-gathered over MPI (see the header).
using Record = CollectiveCall;

std::string Describe(const Record& r) { return absl::StrCat("nccl ", DescribeCall(r)); }

class NcclProcessGroup;

class NcclWork final : public Work {
 public:
  NcclWork(NcclProcessGroup* pg, Record record, cudaEvent_t done, std::vector<Tensor> keep,
           Tensor record_out, std::unique_ptr<Work> record_work, Clock::time_point deadline)
      : pg_(pg),
        record_(record),
        done_(done),
        keep_(std::move(keep)),
        record_out_(std::move(record_out)),
        record_work_(std::move(record_work)),
        deadline_(deadline) {}
  ~NcclWork() override;
  absl::Status Wait() override;

 private:
  NcclProcessGroup* const pg_;
  const Record record_;
  cudaEvent_t done_;
  std::vector<Tensor> keep_;  // the buffers, alive until the collective is done
  Tensor record_out_;
  std::unique_ptr<Work> record_work_;
  const Clock::time_point deadline_;
  bool waited_ = false;
  absl::Status status_;
};

class NcclProcessGroup final : public ProcessGroup {
 public:
  NcclProcessGroup(const DistributedEnv& env, const ProcessGroupOptions& options)
      : rank_(env.rank), size_(env.world_size), device_(options.device.index),
        timeout_(options.timeout_seconds) {}

  ~NcclProcessGroup() override {
    if (comm_ != nullptr) {
      cudaSetDevice(device_);
      // Flush, then free; a finalize that does not finish in time is aborted (PollComm).
      const ncclResult_t r = ncclCommFinalize(comm_);
      if (r == ncclSuccess || r == ncclInProgress) {
        (void)PollComm("ncclCommFinalize", Deadline());
      }
      if (comm_ != nullptr) ncclCommDestroy(comm_);
    }
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    if (ready_ != nullptr) cudaEventDestroy(ready_);
  }

  absl::Status Init(const DistributedEnv& env, const ProcessGroupOptions& options) {
    if (!options.device.is_cuda()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "process group backend \"nccl\" needs a cuda device, got ", options.device.ToString()));
    }
    if (!(timeout_ > 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("process group timeout must be positive seconds, got ", timeout_));
    }
    NCCL_PG_CUDA(cudaSetDevice(device_));
    const Clock::time_point deadline = Deadline();
    ncclUniqueId id;
    std::memset(&id, 0, sizeof(id));
    if (size_ > 1) {
      // The bootstrap and the per-collective records: an "mpi" group of the same world.
      ProcessGroupOptions mpi_options;
      mpi_options.backend = "mpi";
      mpi_options.timeout_seconds = timeout_;
      auto mpi = CreateProcessGroup(env, mpi_options, Device::Cpu());
      if (!mpi.ok()) {
        return absl::Status(mpi.status().code(),
                            absl::StrCat("nccl bootstrap needs the \"mpi\" backend (link "
                                         "//distributed:mpi_process_group): ",
                                         mpi.status().message()));
      }
      mpi_ = std::move(*mpi);
    }
    if (rank_ == 0) {
      const ncclResult_t r = ncclGetUniqueId(&id);
      if (r != ncclSuccess) {
        return absl::UnavailableError(absl::StrCat("ncclGetUniqueId: ", NcclText(r, nullptr)));
      }
    }
    if (mpi_ != nullptr) {
      static_assert(sizeof(ncclUniqueId) % 4 == 0, "");
      CCTUNE_ASSIGN_OR_RETURN(Tensor bytes,
                              Tensor::Zeros({static_cast<int64_t>(sizeof(id) / 4)}, DType::kI32));
      std::memcpy(bytes.raw_data(), &id, sizeof(id));
      absl::Status s = mpi_->Broadcast(bytes, 0);
      if (!s.ok()) {
        return absl::Status(s.code(), absl::StrCat("nccl bootstrap (rank 0's ncclUniqueId): ",
                                                   s.message()));
      }
      std::memcpy(&id, bytes.raw_data(), sizeof(id));
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t r = ncclCommInitRankConfig(&comm_, size_, id, rank_, &config);
    if (r != ncclSuccess && r != ncclInProgress) {
      return absl::UnavailableError(absl::StrCat("ncclCommInitRankConfig on rank ", rank_, " of ",
                                                 size_, ", cuda:", device_, ": ",
                                                 NcclText(r, comm_)));
    }
    CCTUNE_RETURN_IF_ERROR(PollComm("ncclCommInitRankConfig", deadline));
    NCCL_PG_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    NCCL_PG_CUDA(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
    return absl::OkStatus();
  }

  int rank() const override { return rank_; }
  int world_size() const override { return size_; }
  const char* backend() const override { return "nccl"; }

  absl::Status AllReduce(Tensor& t, ReduceOp op) override {
    return WaitFor(StartAllReduce(t, op));
  }
  absl::Status ReduceScatter(const Tensor& input, Tensor& output, ReduceOp op) override {
    return WaitFor(StartReduceScatter(input, output, op));
  }
  absl::Status AllGather(const Tensor& input, Tensor& output) override {
    return WaitFor(StartAllGather(input, output));
  }
  absl::Status Broadcast(Tensor& t, int root) override {
    CCTUNE_RETURN_IF_ERROR(CheckBuffer("broadcast", t));
    if (root < 0 || root >= size_) {
      return absl::InvalidArgumentError(
          absl::StrCat("broadcast: root rank ", root, " is not in a world of ", size_));
    }
    CCTUNE_ASSIGN_OR_RETURN(ncclDataType_t type, NcclType(t.dtype()));
    Record rec = NewRecord(Kind::kBroadcast, t.numel(), t.dtype(), root);
    return WaitFor(Launch(rec, {t}, [&](cudaStream_t s) {
      return ncclBroadcast(t.raw_data(), t.raw_data(), t.numel(), type, root, comm_, s);
    }));
  }
  absl::Status Barrier() override {
    // A one-element all-reduce through NCCL (so the GPU work before it is ordered), plus the
    // record's handshake.
    if (barrier_buf_.numel() == 0) {
      CCTUNE_ASSIGN_OR_RETURN(barrier_buf_,
                              Tensor::Zeros({1}, DType::kF32, Device::Cuda(device_)));
    }
    Record rec = NewRecord(Kind::kBarrier, 1, DType::kF32, 0);
    return WaitFor(Launch(rec, {barrier_buf_}, [&](cudaStream_t s) {
      return ncclAllReduce(barrier_buf_.raw_data(), barrier_buf_.raw_data(), 1, ncclFloat32,
                           ncclSum, comm_, s);
    }));
  }

  absl::StatusOr<std::unique_ptr<Work>> StartAllReduce(Tensor& t, ReduceOp op) {
    CCTUNE_RETURN_IF_ERROR(CheckBuffer("all_reduce", t));
    CCTUNE_ASSIGN_OR_RETURN(ncclDataType_t type, NcclType(t.dtype()));
    Record rec = NewRecord(Kind::kAllReduce, t.numel(), t.dtype(), static_cast<int>(op));
    return Launch(rec, {t}, [&](cudaStream_t s) {
      return ncclAllReduce(t.raw_data(), t.raw_data(), t.numel(), type, NcclOp(op), comm_, s);
    });
  }
  absl::StatusOr<std::unique_ptr<Work>> StartReduceScatter(const Tensor& input, Tensor& output,
                                                           ReduceOp op) override {
    CCTUNE_RETURN_IF_ERROR(CheckBuffer("reduce_scatter", input));
    CCTUNE_RETURN_IF_ERROR(CheckBuffer("reduce_scatter", output));
    CCTUNE_RETURN_IF_ERROR(CheckSizes("reduce_scatter", output, input));
    CCTUNE_ASSIGN_OR_RETURN(ncclDataType_t type, NcclType(input.dtype()));
    Record rec =
        NewRecord(Kind::kReduceScatter, output.numel(), output.dtype(), static_cast<int>(op));
    return Launch(rec, {input, output}, [&](cudaStream_t s) {
      return ncclReduceScatter(input.raw_data(), output.raw_data(), output.numel(), type,
                               NcclOp(op), comm_, s);
    });
  }
  absl::StatusOr<std::unique_ptr<Work>> StartAllGather(const Tensor& input,
                                                       Tensor& output) override {
    CCTUNE_RETURN_IF_ERROR(CheckBuffer("all_gather", input));
    CCTUNE_RETURN_IF_ERROR(CheckBuffer("all_gather", output));
    CCTUNE_RETURN_IF_ERROR(CheckSizes("all_gather", input, output));
    CCTUNE_ASSIGN_OR_RETURN(ncclDataType_t type, NcclType(input.dtype()));
    Record rec = NewRecord(Kind::kAllGather, input.numel(), input.dtype(), 0);
    return Launch(rec, {input, output}, [&](cudaStream_t s) {
      return ncclAllGather(input.raw_data(), output.raw_data(), input.numel(), type, comm_, s);
    });
  }

  [[noreturn]] void Abort(const absl::Status& status) const override {
    if (comm_ != nullptr) ncclCommAbort(comm_);
    if (mpi_ != nullptr) mpi_->Abort(status);
    ProcessGroup::Abort(status);
  }

  // For NcclWork::Wait (the caller's thread).
  absl::Status Finish(const Record& rec, cudaEvent_t done, Work* record_work,
                      const Tensor& record_out, Clock::time_point deadline);

 private:
  friend class NcclWork;

  Clock::time_point Deadline() const {
    return Clock::now() + std::chrono::duration_cast<Clock::duration>(
                              std::chrono::duration<double>(timeout_));
  }

  Record NewRecord(Kind kind, int64_t numel, DType dtype, int arg) {
    Record r;
    r.seq = ++seq_;
    r.kind = static_cast<int32_t>(kind);
    r.numel = numel;
    r.dtype = static_cast<int32_t>(dtype);
    r.arg = arg;
    r.rank = rank_;
    return r;
  }

  absl::Status CheckBuffer(const char* op, const Tensor& t) const {
    if (!t.defined() || !t.is_contiguous() || !t.device().is_cuda() ||
        t.device().index != device_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "nccl ", op, ": tensors must be contiguous and on cuda:", device_,
          t.defined() ? absl::StrCat(" (this one is on ", t.device().ToString(),
                                     t.is_contiguous() ? "" : ", not contiguous", ")")
                      : " (this one is undefined)"));
    }
    return absl::OkStatus();
  }
  absl::Status CheckSizes(const char* op, const Tensor& small, const Tensor& big) const {
    return CheckChunkSizes(absl::StrCat("nccl ", op), small, big, size_);
  }

  // Polls the communicator until no call is in progress: OK, Unavailable (an NCCL error), or
  // DeadlineExceeded (then the communicator is aborted).
  absl::Status PollComm(const char* what, Clock::time_point deadline) {
    for (int spins = 0;; ++spins) {
      ncclResult_t state = ncclSuccess;
      const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
      if (r != ncclSuccess) state = r;
      if (state == ncclSuccess) return absl::OkStatus();
      if (state != ncclInProgress) {
        return Break(absl::UnavailableError(
            absl::StrCat(what, " on rank ", rank_, ": ", NcclText(state, comm_))));
      }
      if (Clock::now() >= deadline) {
        return Break(absl::DeadlineExceededError(absl::StrFormat(
            "%s on rank %d timed out after %g s (a rank did not join)", what, rank_, timeout_)));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(spins < 100 ? 1 : 100));
    }
  }

  absl::Status Break(absl::Status s) {
    if (broken_.ok()) {
      broken_ = s;
      if (comm_ != nullptr) ncclCommAbort(comm_);
      comm_ = nullptr;
    }
    return s;
  }

  template <typename Call>
  absl::StatusOr<std::unique_ptr<Work>> Launch(const Record& rec, std::vector<Tensor> keep,
                                               Call call) {
    if (!broken_.ok()) {
      return absl::Status(broken_.code(),
                          absl::StrCat(Describe(rec), ": the process group failed earlier: ",
                                       broken_.message()));
    }
    const Clock::time_point deadline = Deadline();
    // The record, all-gathered on the MPI group's worker while the GPU works.
    Tensor record_out;
    std::unique_ptr<Work> record_work;
    if (mpi_ != nullptr) {
      CCTUNE_ASSIGN_OR_RETURN(Tensor mine, Tensor::Empty({4}, DType::kI64));
      std::memcpy(mine.raw_data(), &rec, sizeof(rec));
      CCTUNE_ASSIGN_OR_RETURN(record_out, Tensor::Empty({4 * size_}, DType::kI64));
      CCTUNE_ASSIGN_OR_RETURN(record_work, mpi_->StartAllGather(mine, record_out));
    }
    NCCL_PG_CUDA(cudaSetDevice(device_));
    // After the caller's kernels on the legacy default stream.
    NCCL_PG_CUDA(cudaEventRecord(ready_, cudaStreamLegacy));
    NCCL_PG_CUDA(cudaStreamWaitEvent(stream_, ready_, 0));
    const ncclResult_t r = call(stream_);
    if (r != ncclSuccess && r != ncclInProgress) {
      return Break(absl::UnavailableError(
          absl::StrCat(Describe(rec), " on rank ", rank_, ": ", NcclText(r, comm_))));
    }
    CCTUNE_RETURN_IF_ERROR(PollComm(Describe(rec).c_str(), deadline));
    cudaEvent_t done = nullptr;
    NCCL_PG_CUDA(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    NCCL_PG_CUDA(cudaEventRecord(done, stream_));
    return std::unique_ptr<Work>(new NcclWork(this, rec, done, std::move(keep),
                                              std::move(record_out), std::move(record_work),
                                              deadline));
  }

  absl::Status WaitFor(absl::StatusOr<std::unique_ptr<Work>> work) {
    if (!work.ok()) return work.status();
    return (*work)->Wait();
  }

  const int rank_;
  const int size_;
  const int device_;
  const double timeout_;
  std::unique_ptr<ProcessGroup> mpi_;  // null in a world of one
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ready_ = nullptr;
  Tensor barrier_buf_;
  int64_t seq_ = 0;
  absl::Status broken_;
};

absl::Status NcclProcessGroup::Finish(const Record& rec, cudaEvent_t done, Work* record_work,
                                      const Tensor& record_out, Clock::time_point deadline) {
  if (!broken_.ok()) {
    return absl::Status(broken_.code(), absl::StrCat(Describe(rec),
                                                     ": the process group failed earlier: ",
                                                     broken_.message()));
  }
  for (int spins = 0;; ++spins) {
    const cudaError_t q = cudaEventQuery(done);
    if (q == cudaSuccess) break;
    if (q != cudaErrorNotReady) {
      return Break(CudaError(q, absl::StrCat(Describe(rec), ": cudaEventQuery").c_str()));
    }
    ncclResult_t state = ncclSuccess;
    ncclCommGetAsyncError(comm_, &state);
    if (state != ncclSuccess && state != ncclInProgress) {
      return Break(absl::UnavailableError(
          absl::StrCat(Describe(rec), " on rank ", rank_, ": ", NcclText(state, comm_))));
    }
    if (Clock::now() >= deadline) {
      // Who did not come: the record's all-gather says (it has the same deadline).
      std::string why = "every rank entered it (the records all arrived), so the transfer "
                        "itself stalled";
      if (record_work != nullptr) {
        absl::Status rs = record_work->Wait();
        if (!rs.ok()) why = absl::StrCat("the host records: ", rs.message());
      }
      return Break(absl::DeadlineExceededError(absl::StrFormat(
          "%s on rank %d timed out after %g s: %s", Describe(rec), rank_, timeout_, why)));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(spins < 200 ? 2 : 100));
  }
  if (record_work == nullptr) return absl::OkStatus();
  absl::Status rs = record_work->Wait();
  if (!rs.ok()) return rs;
  const Record* all = static_cast<const Record*>(record_out.raw_data());
  for (int r = 0; r < size_; ++r) {
    if (!SameCall(all[r], rec)) {
      return Break(absl::FailedPreconditionError(absl::StrCat(
          Describe(rec), " on rank ", rank_, ": rank ", r, " called ", Describe(all[r]),
          " (every rank must call the same collectives, with the same sizes, in the same "
          "order)")));
    }
  }
  return absl::OkStatus();
}

NcclWork::~NcclWork() {
  if (!waited_) (void)Wait();  // the buffers must outlive the collective
  if (done_ != nullptr) cudaEventDestroy(done_);
}

absl::Status NcclWork::Wait() {
  if (waited_) return status_;
  status_ = pg_->Finish(record_, done_, record_work_.get(), record_out_, deadline_);
  waited_ = true;
  if (status_.ok()) keep_.clear();
  return status_;
}

[[maybe_unused]] const bool kRegistered = [] {
  RegisterProcessGroupBackend("nccl", CreateNcclProcessGroup);
  return true;
}();

}  // namespace

absl::StatusOr<std::unique_ptr<ProcessGroup>> CreateNcclProcessGroup(
    const DistributedEnv& env, const ProcessGroupOptions& options) {
  auto pg = std::make_unique<NcclProcessGroup>(env, options);
  CCTUNE_RETURN_IF_ERROR(pg->Init(env, options));
  return std::unique_ptr<ProcessGroup>(std::move(pg));
}

}  // namespace cctune
