#include "distributed/timed_process_group.h"

#include <chrono>
#include <utility>

#include "core/status.h"

namespace cctune {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

class TimedWork final : public Work {
 public:
  TimedWork(std::unique_ptr<Work> inner, TimedProcessGroup* group)
      : inner_(std::move(inner)), group_(group) {}
  absl::Status Wait() override {
    const Clock::time_point t0 = Clock::now();
    absl::Status s = inner_->Wait();
    group_->AddBlocked(Since(t0));
    return s;
  }

 private:
  std::unique_ptr<Work> inner_;
  TimedProcessGroup* group_;
};

}  // namespace

#define CCTUNE_TIMED(call)                       \
  do {                                           \
    ++collectives_;                              \
    const Clock::time_point t0 = Clock::now();   \
    absl::Status s = (call);                     \
    blocked_seconds_ += Since(t0);               \
    return s;                                    \
  } while (false)

absl::Status TimedProcessGroup::AllReduce(Tensor& t, ReduceOp op) {
  CCTUNE_TIMED(inner_->AllReduce(t, op));
}
absl::Status TimedProcessGroup::ReduceScatter(const Tensor& input, Tensor& output, ReduceOp op) {
  CCTUNE_TIMED(inner_->ReduceScatter(input, output, op));
}
absl::Status TimedProcessGroup::AllGather(const Tensor& input, Tensor& output) {
  CCTUNE_TIMED(inner_->AllGather(input, output));
}
absl::Status TimedProcessGroup::Broadcast(Tensor& t, int root) {
  CCTUNE_TIMED(inner_->Broadcast(t, root));
}
absl::Status TimedProcessGroup::Barrier() { CCTUNE_TIMED(inner_->Barrier()); }

#undef CCTUNE_TIMED

absl::StatusOr<std::unique_ptr<Work>> TimedProcessGroup::StartAllGather(const Tensor& input,
                                                                        Tensor& output) {
  ++collectives_;
  const Clock::time_point t0 = Clock::now();
  absl::StatusOr<std::unique_ptr<Work>> w = inner_->StartAllGather(input, output);
  blocked_seconds_ += Since(t0);
  if (!w.ok()) return w.status();
  return std::unique_ptr<Work>(new TimedWork(std::move(*w), this));
}

absl::StatusOr<std::unique_ptr<Work>> TimedProcessGroup::StartReduceScatter(const Tensor& input,
                                                                            Tensor& output,
                                                                            ReduceOp op) {
  ++collectives_;
  const Clock::time_point t0 = Clock::now();
  absl::StatusOr<std::unique_ptr<Work>> w = inner_->StartReduceScatter(input, output, op);
  blocked_seconds_ += Since(t0);
  if (!w.ok()) return w.status();
  return std::unique_ptr<Work>(new TimedWork(std::move(*w), this));
}

}  // namespace cctune
