#include "distributed/mpi_process_group.h"

#include <mpi.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status.h"
#include "distributed/collective_call.h"
#include "distributed/local_reduce.h"
#include "distributed/mpi_runtime.h"

namespace cctune {
namespace {

using Clock = std::chrono::steady_clock;

using Kind = CollectiveKind;
using Arrival = CollectiveCall;  // the handshake record

std::string Describe(const Arrival& a) { return DescribeCall(a); }

// One collective, queued for the group's worker thread.
struct Task {
  Arrival call;
  ReduceOp op = ReduceOp::kSum;
  Tensor input;   // all_reduce / broadcast: the tensor itself
  Tensor output;  // same as input for the in-place ones
  // Counts and displacements (elements) that MPI reads until the data phase completes.
  std::vector<int> counts, displs, recv_counts, recv_displs;

  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  absl::Status status;

  void Finish(absl::Status s) {
    {
      std::lock_guard<std::mutex> lock(mu);
      status = std::move(s);
      done = true;
    }
    cv.notify_all();
  }
  // The group's count of threads blocked in Wait() (its worker polls without sleeping then).
  std::shared_ptr<std::atomic<int>> waiters;

  absl::Status Wait() {
    std::unique_lock<std::mutex> lock(mu);
    if (!done) {
      if (waiters) waiters->fetch_add(1, std::memory_order_relaxed);
      cv.wait(lock, [this] { return done; });
      if (waiters) waiters->fetch_sub(1, std::memory_order_relaxed);
    }
    return status;
  }
};

class MpiWork final : public Work {
 public:
  explicit MpiWork(std::shared_ptr<Task> task) : task_(std::move(task)) {}
  absl::Status Wait() override { return task_->Wait(); }

 private:
  std::shared_ptr<Task> task_;
};

// Between two MPI_Test calls. Each test moves the transfer on (vader's copies, CMA's reads and
// their acknowledgements happen inside it), so a sleep between tests is time the collective
// stands still. While a thread is blocked waiting for the group's work, its core is free:
// yield only (up to kWaitedSpin, so that a peer that is seconds late, saving a checkpoint say,
// does not keep a core busy). Otherwise the collective overlaps compute: spin briefly (on
// shared memory one completes in microseconds), then sleep, up to 100 us, leaving the core to
// the compute.
class Backoff {
 public:
  static constexpr std::chrono::milliseconds kWaitedSpin{20};

  explicit Backoff(const std::atomic<int>* waiters) : waiters_(waiters) {}

  void Pause() {
    if (waiters_ != nullptr && waiters_->load(std::memory_order_relaxed) > 0) {
      const auto now = std::chrono::steady_clock::now();
      if (!spinning_) {
        spinning_ = true;
        spin_start_ = now;
      }
      if (now - spin_start_ < kWaitedSpin) {
        std::this_thread::yield();
        return;
      }
    } else {
      spinning_ = false;
    }
    if (++spins_ < 64) {
      std::this_thread::yield();
      return;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(sleep_us_));
    sleep_us_ = std::min(sleep_us_ * 2, 100);
  }

 private:
  const std::atomic<int>* waiters_;
  bool spinning_ = false;
  std::chrono::steady_clock::time_point spin_start_{};
  int spins_ = 0;
  int sleep_us_ = 2;
};

absl::Status CheckBuffer(const char* op, const char* which, const Tensor& t) {
  if (!t.defined() || !t.is_contiguous() || !t.device().is_cpu()) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": the ", which, " tensor must be a defined, contiguous CPU tensor",
        t.defined() ? absl::StrCat(" (it is ", t.device().ToString(),
                                   t.is_contiguous() ? "" : ", not contiguous", ")")
                    : ""));
  }
  if (t.numel() > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": the ", which, " tensor has ", t.numel(),
                                                   " elements, more than MPI's int counts allow (",
                                                   INT_MAX, "); split it"));
  }
  return absl::OkStatus();
}

// Who a rank is, exchanged when a group is created, so that a wait can tell that a rank on this
// node is gone (killed, crashed) without waiting for the timeout.
struct ProcessId {
  int64_t pid = 0;
  uint64_t start_time = 0;  // /proc/<pid>/stat field 22 (clock ticks after boot)
  char host[64] = {};
};

// The state and start time of process `pid` from /proc; false when it does not exist.
bool ReadProcStat(int64_t pid, char* state, uint64_t* start_time) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%lld/stat", static_cast<long long>(pid));
  std::FILE* f = std::fopen(path, "r");
  if (f == nullptr) return false;
  char buf[1024];
  const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  const char* p = std::strrchr(buf, ')');  // the command name may hold spaces and parentheses
  if (p == nullptr) return false;
  unsigned long long start = 0;
  // state (field 3), then fields 4..21 skipped, then starttime (22).
  if (std::sscanf(p + 1, " %c %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %llu",
                  state, &start) != 2) {
    return false;
  }
  *start_time = start;
  return true;
}

// Set when the process exits: ranks that finish leave one by one then, which is no death.
std::atomic<bool> g_exiting{false};
void MarkExiting() { g_exiting = true; }

bool ProcessAlive(const ProcessId& id) {
  char state = 0;
  uint64_t start = 0;
  if (!ReadProcStat(id.pid, &state, &start)) return false;
  return state != 'Z' && state != 'X' && state != 'x' && start == id.start_time;
}

class MpiProcessGroup final : public ProcessGroup {
 public:
  MpiProcessGroup(MpiRuntime* rt, double timeout_seconds)
      : rt_(rt), rank_(rt->world_rank()), size_(rt->world_size()), timeout_(timeout_seconds) {}

  ~MpiProcessGroup() override {
    if (monitor_.joinable()) {
      {
        std::lock_guard<std::mutex> lock(monitor_mu_);
        monitor_stop_ = true;
      }
      monitor_cv_.notify_all();
      monitor_.join();
    }
    if (worker_.joinable()) {
      {
        std::lock_guard<std::mutex> lock(queue_mu_);
        stop_ = true;
      }
      queue_cv_.notify_all();
      worker_.join();  // runs what is queued first: each collective ends by its deadline
    }
    if (requests_left_) {
      // MPI may still write into the failed collective's buffers: never free them.
      new std::vector<char>(std::move(scratch_));
      new std::vector<Arrival>(std::move(arrivals_));
      new std::vector<std::shared_ptr<Task>>(std::move(abandoned_));
      return;
    }
    auto lock = rt_->Lock();
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    for (MPI_Comm* c : {&side_, &comm_}) {
      if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
    }
    for (MPI_Datatype& t : types_) {
      if (t != MPI_DATATYPE_NULL) MPI_Type_free(&t);
    }
  }

  absl::Status Init() {
    // Element types of 1, 2, 4 and 8 bytes: counts are in elements, so up to INT_MAX of them.
    {
      auto lock = rt_->Lock();
      for (int i = 0; i < 4; ++i) {
        MPI_Type_contiguous(1 << i, MPI_BYTE, &types_[i]);
        MPI_Type_commit(&types_[i]);
      }
    }
    const Clock::time_point deadline = Deadline();
    CCTUNE_RETURN_IF_ERROR(Dup(MPI_COMM_WORLD, &comm_, deadline));
    CCTUNE_RETURN_IF_ERROR(Dup(comm_, &side_, deadline));
    CCTUNE_RETURN_IF_ERROR(ExchangeProcessIds(deadline));
    worker_ = std::thread([this] { WorkerLoop(); });
    if (std::find(watched_.begin(), watched_.end(), true) != watched_.end()) {
      static const bool registered = [] { return std::atexit(&MarkExiting) == 0; }();
      (void)registered;
      monitor_ = std::thread([this] { MonitorLoop(); });
    }
    return absl::OkStatus();
  }

  int rank() const override { return rank_; }
  int world_size() const override { return size_; }
  const char* backend() const override { return "mpi"; }
  std::string transport() const override {
    return rt_->shared_memory_copy().empty()
               ? std::string()
               : absl::StrCat("shared memory: ", rt_->shared_memory_copy());
  }

  absl::Status AllReduce(Tensor& t, ReduceOp op) override {
    CCTUNE_ASSIGN_OR_RETURN(std::shared_ptr<Task> task, PrepareAllReduce(t, op));
    return Run(std::move(task));
  }
  absl::Status ReduceScatter(const Tensor& input, Tensor& output, ReduceOp op) override {
    CCTUNE_ASSIGN_OR_RETURN(std::shared_ptr<Task> task, PrepareReduceScatter(input, output, op));
    return Run(std::move(task));
  }
  absl::Status AllGather(const Tensor& input, Tensor& output) override {
    CCTUNE_ASSIGN_OR_RETURN(std::shared_ptr<Task> task, PrepareAllGather(input, output));
    return Run(std::move(task));
  }
  absl::Status Broadcast(Tensor& t, int root) override {
    CCTUNE_RETURN_IF_ERROR(CheckBuffer("broadcast", "", t));
    if (root < 0 || root >= size_) {
      return absl::InvalidArgumentError(
          absl::StrCat("broadcast: root rank ", root, " is not in a world of ", size_));
    }
    auto task = NewTask(Kind::kBroadcast, t, t, t.numel());
    task->call.arg = root;
    return Run(std::move(task));
  }
  absl::Status Barrier() override {
    return Run(NewTask(Kind::kBarrier, Tensor(), Tensor(), 0));
  }

  absl::StatusOr<std::unique_ptr<Work>> StartAllGather(const Tensor& input,
                                                       Tensor& output) override {
    CCTUNE_ASSIGN_OR_RETURN(std::shared_ptr<Task> task, PrepareAllGather(input, output));
    return Start(std::move(task));
  }
  absl::StatusOr<std::unique_ptr<Work>> StartReduceScatter(const Tensor& input, Tensor& output,
                                                           ReduceOp op) override {
    CCTUNE_ASSIGN_OR_RETURN(std::shared_ptr<Task> task, PrepareReduceScatter(input, output, op));
    return Start(std::move(task));
  }

  [[noreturn]] void Abort(const absl::Status& status) const override { rt_->Abort(status.ToString(), 1); }

 private:
  Clock::time_point Deadline() const {
    return Clock::now() + std::chrono::duration_cast<Clock::duration>(
                              std::chrono::duration<double>(timeout_));
  }
  MPI_Datatype TypeOf(DType dtype) const {
    switch (DTypeSize(dtype)) {
      case 1:
        return types_[0];
      case 2:
        return types_[1];
      case 4:
        return types_[2];
      default:
        return types_[3];
    }
  }

  std::shared_ptr<Task> NewTask(Kind kind, const Tensor& input, const Tensor& output,
                                int64_t numel) {
    auto task = std::make_shared<Task>();
    task->call.kind = static_cast<int32_t>(kind);
    task->call.numel = numel;
    task->call.dtype = static_cast<int32_t>(input.defined() ? input.dtype() : DType::kF32);
    task->call.rank = rank_;
    task->input = input;
    task->output = output;
    task->waiters = waiters_;
    return task;
  }

  absl::StatusOr<std::shared_ptr<Task>> PrepareAllReduce(const Tensor& t, ReduceOp op) {
    CCTUNE_RETURN_IF_ERROR(CheckBuffer("all_reduce", "", t));
    CCTUNE_RETURN_IF_ERROR(ValidateReduce("all_reduce", t.dtype(), op));
    auto task = NewTask(Kind::kAllReduce, t, t, t.numel());
    task->op = op;
    task->call.arg = static_cast<int32_t>(op);
    // Rank r owns elements [displs[r], displs[r] + counts[r]), the sizes as even as they go.
    const int64_t n = t.numel();
    task->counts.resize(size_);
    task->displs.resize(size_);
    int64_t offset = 0;
    for (int r = 0; r < size_; ++r) {
      task->counts[r] = static_cast<int>(n / size_ + (r < n % size_ ? 1 : 0));
      task->displs[r] = static_cast<int>(offset);
      offset += task->counts[r];
    }
    const int mine = task->counts[rank_];
    task->recv_counts.assign(size_, mine);
    task->recv_displs.resize(size_);
    for (int r = 0; r < size_; ++r) task->recv_displs[r] = r * mine;
    return task;
  }

  absl::StatusOr<std::shared_ptr<Task>> PrepareReduceScatter(const Tensor& input,
                                                             const Tensor& output, ReduceOp op) {
    CCTUNE_RETURN_IF_ERROR(CheckBuffer("reduce_scatter", "input", input));
    CCTUNE_RETURN_IF_ERROR(CheckBuffer("reduce_scatter", "output", output));
    CCTUNE_RETURN_IF_ERROR(ValidateReduce("reduce_scatter", input.dtype(), op));
    CCTUNE_RETURN_IF_ERROR(CheckSizes("reduce_scatter", output, input));
    auto task = NewTask(Kind::kReduceScatter, input, output, output.numel());
    task->op = op;
    task->call.arg = static_cast<int32_t>(op);
    return task;
  }

  absl::StatusOr<std::shared_ptr<Task>> PrepareAllGather(const Tensor& input,
                                                         const Tensor& output) {
    CCTUNE_RETURN_IF_ERROR(CheckBuffer("all_gather", "input", input));
    CCTUNE_RETURN_IF_ERROR(CheckBuffer("all_gather", "output", output));
    CCTUNE_RETURN_IF_ERROR(CheckSizes("all_gather", input, output));
    if (input.SharesStorageWith(output) && !InPlaceGather(input, output)) {
      const int64_t in0 = input.offset(), in1 = in0 + input.numel();
      const int64_t out0 = output.offset(), out1 = out0 + output.numel();
      if (in0 < out1 && out0 < in1) {
        return absl::InvalidArgumentError(absl::StrCat(
            "all_gather: the input overlaps the output but is not its chunk ", rank_,
            " (in place, the input must be exactly this rank's chunk)"));
      }
    }
    return NewTask(Kind::kAllGather, input, output, input.numel());
  }

  absl::Status CheckSizes(const char* op, const Tensor& small, const Tensor& big) const {
    return CheckChunkSizes(op, small, big, size_);
  }

  bool InPlaceGather(const Tensor& input, const Tensor& output) const {
    return input.numel() > 0 &&
           input.raw_data() ==
               static_cast<char*>(output.raw_data()) + rank_ * input.nbytes();
  }

  absl::StatusOr<std::unique_ptr<Work>> Start(std::shared_ptr<Task> task) {
    {
      std::lock_guard<std::mutex> lock(queue_mu_);
      queue_.push_back(task);
    }
    queue_cv_.notify_one();
    return std::unique_ptr<Work>(new MpiWork(std::move(task)));
  }
  absl::Status Run(std::shared_ptr<Task> task) {
    CCTUNE_ASSIGN_OR_RETURN(std::unique_ptr<Work> work, Start(std::move(task)));
    return work->Wait();
  }

  void WorkerLoop() {
    for (;;) {
      std::shared_ptr<Task> task;
      {
        std::unique_lock<std::mutex> lock(queue_mu_);
        queue_cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      if (!broken_.ok()) {
        task->call.seq = seq_ + 1;
        task->Finish(absl::Status(broken_.code(),
                                  absl::StrCat(Describe(task->call),
                                               ": the process group failed earlier: ",
                                               broken_.message())));
        continue;
      }
      task->call.seq = ++seq_;
      SetInFlight(Describe(task->call), true);
      absl::Status status = Execute(*task);
      SetInFlight(Describe(task->call), false);
      if (!status.ok()) {
        broken_ = status;
        // A mismatch is found before any data moves, with every request done; a timeout or
        // an MPI error leaves requests that may still write.
        if (status.code() != absl::StatusCode::kFailedPrecondition) {
          requests_left_ = true;
          rt_->MarkFailed();
          abandoned_.push_back(task);
        }
      }
      task->Finish(std::move(status));
    }
  }

  absl::Status Execute(Task& task) {
    const Clock::time_point deadline = Deadline();
    CCTUNE_RETURN_IF_ERROR(Handshake(task.call, deadline));
    const DType dtype = static_cast<DType>(task.call.dtype);
    const MPI_Datatype type = TypeOf(dtype);
    const size_t esize = DTypeSize(dtype);
    MPI_Request req = MPI_REQUEST_NULL;
    switch (static_cast<Kind>(task.call.kind)) {
      case Kind::kBarrier:
        return absl::OkStatus();  // the handshake is a barrier
      case Kind::kBroadcast:
        if (task.call.numel == 0) return absl::OkStatus();
        CCTUNE_RETURN_IF_ERROR(Issue(task, MPI_Ibcast(task.input.raw_data(),
                                                      static_cast<int>(task.call.numel), type,
                                                      task.call.arg, comm_, &req)));
        return Await(task, &req, deadline);
      case Kind::kAllGather: {
        if (task.call.numel == 0) return absl::OkStatus();
        const int n = static_cast<int>(task.call.numel);
        const void* send = InPlaceGather(task.input, task.output) ? MPI_IN_PLACE
                                                                  : task.input.raw_data();
        CCTUNE_RETURN_IF_ERROR(Issue(
            task, MPI_Iallgather(send, n, type, task.output.raw_data(), n, type, comm_, &req)));
        return Await(task, &req, deadline);
      }
      case Kind::kReduceScatter: {
        const int64_t n = task.call.numel;
        if (n == 0) return absl::OkStatus();
        scratch_.resize(static_cast<size_t>(n) * size_ * esize);
        CCTUNE_RETURN_IF_ERROR(Issue(task, MPI_Ialltoall(task.input.raw_data(), static_cast<int>(n),
                                                         type, scratch_.data(), static_cast<int>(n),
                                                         type, comm_, &req)));
        CCTUNE_RETURN_IF_ERROR(Await(task, &req, deadline));
        ReduceBlocks(scratch_.data(), size_, n, n, dtype, task.op, task.output.raw_data());
        return absl::OkStatus();
      }
      case Kind::kAllReduce: {
        if (task.call.numel == 0) return absl::OkStatus();
        char* data = static_cast<char*>(task.input.raw_data());
        const int mine = task.counts[rank_];
        scratch_.resize(static_cast<size_t>(mine) * size_ * esize);
        CCTUNE_RETURN_IF_ERROR(Issue(
            task, MPI_Ialltoallv(data, task.counts.data(), task.displs.data(), type,
                                 scratch_.data(), task.recv_counts.data(),
                                 task.recv_displs.data(), type, comm_, &req)));
        CCTUNE_RETURN_IF_ERROR(Await(task, &req, deadline));
        ReduceBlocks(scratch_.data(), size_, mine, mine, dtype, task.op,
                     data + static_cast<size_t>(task.displs[rank_]) * esize);
        CCTUNE_RETURN_IF_ERROR(Issue(task, MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data,
                                                           task.counts.data(), task.displs.data(),
                                                           type, comm_, &req)));
        return Await(task, &req, deadline);
      }
    }
    return absl::InternalError(absl::StrCat("unknown collective ", task.call.kind));
  }

  absl::Status Issue(const Task& task, int rc) const {
    if (rc == MPI_SUCCESS) return absl::OkStatus();
    return absl::UnavailableError(
        absl::StrCat(Describe(task.call), " on rank ", rank_, ": ", MpiErrorString(rc)));
  }

  // Tests `reqs` until each is done (MPI_REQUEST_NULL) or the deadline passes: OK, Unavailable
  // on an MPI error, or DeadlineExceeded (the caller words it). Locks MPI for each test only.
  absl::Status Poll(MPI_Request* reqs, int n, Clock::time_point deadline, const Arrival& call,
                    bool* timed_out) {
    *timed_out = false;
    std::vector<int> indices(n);
    Backoff backoff(waiters_.get());
    for (;;) {
      int outcount = 0;
      int rc;
      {
        auto lock = rt_->Lock();
        rc = MPI_Testsome(n, reqs, &outcount, indices.data(), MPI_STATUSES_IGNORE);
      }
      if (rc != MPI_SUCCESS) {
        return absl::UnavailableError(
            absl::StrCat(Describe(call), " on rank ", rank_, ": ", MpiErrorString(rc)));
      }
      if (outcount == MPI_UNDEFINED) return absl::OkStatus();  // every request is done
      const Clock::time_point now = Clock::now();
      if (now >= next_liveness_check_) {
        next_liveness_check_ = now + std::chrono::milliseconds(20);
        CCTUNE_RETURN_IF_ERROR(CheckPeersAlive(call));
      }
      if (now >= deadline) {
        *timed_out = true;
        return absl::DeadlineExceededError("");
      }
      backoff.Pause();
    }
  }

  void SetInFlight(std::string what, bool in_flight) {
    std::lock_guard<std::mutex> lock(monitor_mu_);
    op_ = std::move(what);
    op_in_flight_ = in_flight;
  }

  // Every 50 ms: whether a watched rank's process is gone. If one is, says so on stderr at
  // once, naming it and the collective in flight (or the last one), whatever this rank is
  // doing: the launcher ends the run within a second of a death (mpirun: SIGTERM, then
  // SIGKILL 1 s later), possibly before this rank reaches a collective that would fail.
  void MonitorLoop() {
    std::vector<bool> watched = watched_;
    std::unique_lock<std::mutex> lock(monitor_mu_);
    while (!monitor_stop_) {
      monitor_cv_.wait_for(lock, std::chrono::milliseconds(50));
      if (monitor_stop_) return;
      std::vector<int> dead;
      std::string pids;
      for (int r = 0; r < size_; ++r) {
        if (!watched[r] || ProcessAlive(peers_[r])) continue;
        dead.push_back(r);
        absl::StrAppend(&pids, pids.empty() ? "" : ", ", peers_[r].pid);
      }
      if (dead.empty()) continue;
      if (g_exiting) return;
      const std::string where =
          op_.empty() ? std::string("before its first collective")
                      : op_in_flight_ ? absl::StrCat("in ", op_)
                                      : absl::StrCat("between collectives, after ", op_);
      std::fprintf(stderr,
                   "cctune: rank %d of %d: %s (pid %s on this node) died: killed or crashed, "
                   "while this rank was %s; the run cannot go on (resume from the last "
                   "checkpoint)\n",
                   rank_, size_, RankList(dead, size_).c_str(), pids.c_str(), where.c_str());
      std::fflush(stderr);
      return;
    }
  }

  // The ranks on this node whose process is gone: Unavailable naming them (a rank on another
  // node is noticed by the timeout alone).
  absl::Status CheckPeersAlive(const Arrival& call) {
    std::vector<int> dead;
    std::string pids;
    for (int r = 0; r < static_cast<int>(watched_.size()); ++r) {
      if (!watched_[r] || ProcessAlive(peers_[r])) continue;
      watched_[r] = false;
      dead.push_back(r);
      absl::StrAppend(&pids, pids.empty() ? "" : ", ", peers_[r].pid);
    }
    if (dead.empty()) return absl::OkStatus();
    return absl::UnavailableError(absl::StrFormat(
        "%s on rank %d: %s (pid %s on this node) died: killed or crashed (the run cannot go on; "
        "resume from the last checkpoint)",
        Describe(call), rank_, RankList(dead, size_), pids));
  }

  // Every rank's ProcessId; watches the ranks of this node whose /proc entry this process sees.
  absl::Status ExchangeProcessIds(Clock::time_point deadline) {
    if (size_ == 1) return absl::OkStatus();
    ProcessId mine;
    mine.pid = static_cast<int64_t>(::getpid());
    char state = 0;
    if (!ReadProcStat(mine.pid, &state, &mine.start_time)) mine.pid = 0;  // no /proc: no watch
    if (::gethostname(mine.host, sizeof(mine.host) - 1) != 0) mine.host[0] = '\0';
    peers_.assign(size_, ProcessId{});
    MPI_Request req = MPI_REQUEST_NULL;
    int rc;
    {
      auto lock = rt_->Lock();
      rc = MPI_Iallgather(&mine, sizeof(ProcessId), MPI_BYTE, peers_.data(), sizeof(ProcessId),
                          MPI_BYTE, side_, &req);
    }
    CCTUNE_RETURN_IF_ERROR(AwaitCreation(rc, &req, deadline));
    watched_.assign(size_, false);
    // CCTUNE_MPI_WATCH_PEERS=0: the timeout alone, as for ranks on other nodes (tests).
    if (const char* w = std::getenv("CCTUNE_MPI_WATCH_PEERS"); w != nullptr && std::strcmp(w, "0") == 0) {
      return absl::OkStatus();
    }
    for (int r = 0; r < size_; ++r) {
      const ProcessId& p = peers_[r];
      watched_[r] = r != rank_ && mine.pid != 0 && p.pid > 0 && mine.host[0] != '\0' &&
                    std::strncmp(p.host, mine.host, sizeof(p.host)) == 0 && ProcessAlive(p);
    }
    return absl::OkStatus();
  }

  absl::Status Await(const Task& task, MPI_Request* req, Clock::time_point deadline) {
    bool timed_out = false;
    absl::Status s = Poll(req, 1, deadline, task.call, &timed_out);
    if (!timed_out) return s;
    return absl::DeadlineExceededError(absl::StrFormat(
        "%s on rank %d timed out after %g s moving data: every rank had arrived (the handshake "
        "completed), so a rank or a link stalled mid-transfer",
        Describe(task.call), rank_, timeout_));
  }

  // Phase 1 (see the header): every rank's arrival record, or the ranks not heard from.
  absl::Status Handshake(const Arrival& mine, Clock::time_point deadline) {
    if (size_ == 1) return absl::OkStatus();
    sent_ = mine;
    arrivals_.assign(size_, Arrival{});
    std::vector<MPI_Request> reqs(2 * (size_ - 1), MPI_REQUEST_NULL);
    {
      auto lock = rt_->Lock();
      int i = 0;
      for (int r = 0; r < size_; ++r) {
        if (r == rank_) continue;
        int rc = MPI_Irecv(&arrivals_[r], sizeof(Arrival), MPI_BYTE, r, kTag, side_, &reqs[i]);
        if (rc == MPI_SUCCESS) {
          rc = MPI_Isend(&sent_, sizeof(Arrival), MPI_BYTE, r, kTag, side_,
                         &reqs[size_ - 1 + i]);
        }
        if (rc != MPI_SUCCESS) {
          return absl::UnavailableError(absl::StrCat(Describe(mine), " on rank ", rank_,
                                                     ": sending the arrival to rank ", r, ": ",
                                                     MpiErrorString(rc)));
        }
        ++i;
      }
    }
    bool timed_out = false;
    absl::Status s = Poll(reqs.data(), static_cast<int>(reqs.size()), deadline, mine, &timed_out);
    if (timed_out) {
      std::vector<int> missing;
      int i = 0;
      for (int r = 0; r < size_; ++r) {
        if (r == rank_) continue;
        if (reqs[i++] != MPI_REQUEST_NULL) missing.push_back(r);
      }
      if (missing.empty()) {  // received every record; our own sends did not complete
        for (int r = 0, j = 0; r < size_; ++r) {
          if (r == rank_) continue;
          if (reqs[size_ - 1 + j++] != MPI_REQUEST_NULL) missing.push_back(r);
        }
      }
      return absl::DeadlineExceededError(absl::StrFormat(
          "%s on rank %d timed out after %g s: no word from %s (a rank that died, hangs or "
          "called another collective; distributed_timeout_seconds sets the limit)",
          Describe(mine), rank_, timeout_, RankList(missing, size_)));
    }
    CCTUNE_RETURN_IF_ERROR(s);
    for (int r = 0; r < size_; ++r) {
      if (r == rank_ || SameCall(arrivals_[r], mine)) continue;
      return absl::FailedPreconditionError(absl::StrCat(
          Describe(mine), " on rank ", rank_, ": rank ", r, " called ", Describe(arrivals_[r]),
          " (every rank must call the same collectives, with the same sizes, in the same order)"));
    }
    return absl::OkStatus();
  }

  absl::Status Dup(MPI_Comm from, MPI_Comm* to, Clock::time_point deadline) {
    MPI_Request req = MPI_REQUEST_NULL;
    int rc;
    {
      auto lock = rt_->Lock();
      rc = MPI_Comm_idup(from, to, &req);
    }
    CCTUNE_RETURN_IF_ERROR(AwaitCreation(rc, &req, deadline));
    auto lock = rt_->Lock();
    MPI_Comm_set_errhandler(*to, MPI_ERRORS_RETURN);
    return absl::OkStatus();
  }

  // A request of the group's creation (rc: what starting it returned) waited for until the
  // deadline, as a barrier; a timeout breaks the group and names the likely cause.
  absl::Status AwaitCreation(int rc, MPI_Request* req, Clock::time_point deadline) {
    if (rc != MPI_SUCCESS) {
      return absl::UnavailableError(
          absl::StrCat("creating the MPI process group: ", MpiErrorString(rc)));
    }
    Arrival call;
    call.kind = static_cast<int32_t>(Kind::kBarrier);
    bool timed_out = false;
    absl::Status s = Poll(req, 1, deadline, call, &timed_out);
    if (timed_out) {
      broken_ = absl::DeadlineExceededError("creating the group timed out");
      requests_left_ = true;
      rt_->MarkFailed();
      return absl::DeadlineExceededError(absl::StrFormat(
          "creating the MPI process group on rank %d timed out after %g s: a rank did not "
          "create its group (every rank creates its groups in the same order)",
          rank_, timeout_));
    }
    return s;
  }

  static constexpr int kTag = 7;

  MpiRuntime* const rt_;
  const int rank_;
  const int size_;
  const double timeout_;
  MPI_Comm comm_ = MPI_COMM_NULL;  // the data
  MPI_Comm side_ = MPI_COMM_NULL;  // the handshakes
  MPI_Datatype types_[4] = {MPI_DATATYPE_NULL, MPI_DATATYPE_NULL, MPI_DATATYPE_NULL,
                            MPI_DATATYPE_NULL};

  std::mutex queue_mu_;
  std::condition_variable queue_cv_;
  std::deque<std::shared_ptr<Task>> queue_;
  bool stop_ = false;
  std::thread worker_;
  std::shared_ptr<std::atomic<int>> waiters_ = std::make_shared<std::atomic<int>>(0);

  // The worker's own (no lock).
  int64_t seq_ = 0;
  absl::Status broken_;
  bool requests_left_ = false;  // a failed collective's requests are still posted
  Arrival sent_;
  std::vector<Arrival> arrivals_;
  std::vector<char> scratch_;
  std::vector<std::shared_ptr<Task>> abandoned_;
  // Every rank's process, and which of them a wait checks on (this node's, seen in /proc).
  std::vector<ProcessId> peers_;
  std::vector<bool> watched_;
  Clock::time_point next_liveness_check_{};
  // The monitor thread (MonitorLoop) and what it reports: the worker's collective.
  std::thread monitor_;
  std::mutex monitor_mu_;
  std::condition_variable monitor_cv_;
  bool monitor_stop_ = false;
  std::string op_;
  bool op_in_flight_ = false;
};

[[maybe_unused]] const bool kRegistered = [] {
  RegisterProcessGroupBackend("mpi", CreateMpiProcessGroup);
  return true;
}();

}  // namespace

absl::StatusOr<std::unique_ptr<ProcessGroup>> CreateMpiProcessGroup(
    const DistributedEnv& env, const ProcessGroupOptions& options) {
  if (!(options.timeout_seconds > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "process group timeout must be positive seconds, got ", options.timeout_seconds));
  }
  CCTUNE_ASSIGN_OR_RETURN(MpiRuntime * rt, MpiRuntime::Get());
  if (env.world_size != rt->world_size() || env.rank != rt->world_rank()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the launcher's environment (", env.source, ") says rank ", env.rank, " of ",
        env.world_size, " but MPI_COMM_WORLD has rank ", rt->world_rank(), " of ",
        rt->world_size(), ": start the \"mpi\" backend with mpirun or srun (cctune run "
        "--nproc_per_node N)"));
  }
  auto pg = std::make_unique<MpiProcessGroup>(rt, options.timeout_seconds);
  CCTUNE_RETURN_IF_ERROR(pg->Init());
  return std::unique_ptr<ProcessGroup>(std::move(pg));
}

}  // namespace cctune
