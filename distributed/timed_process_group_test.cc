#include "distributed/timed_process_group.h"

#include <chrono>
#include <memory>
#include <thread>

#include "core/tensor.h"
#include "gtest/gtest.h"

namespace cctune {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// A world of one whose blocking collectives take 20 ms and whose started all-gather is done
// 30 ms after it starts.
class SlowGroup final : public ProcessGroup {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  const char* backend() const override { return "slow"; }
  absl::Status AllReduce(Tensor&, ReduceOp) override { return Sleep(); }
  absl::Status ReduceScatter(const Tensor&, Tensor&, ReduceOp) override { return Sleep(); }
  absl::Status AllGather(const Tensor&, Tensor&) override { return Sleep(); }
  absl::Status Broadcast(Tensor&, int) override { return Sleep(); }
  absl::Status Barrier() override { return Sleep(); }
  absl::StatusOr<std::unique_ptr<Work>> StartAllGather(const Tensor&, Tensor&) override {
    class Done final : public Work {
     public:
      explicit Done(Clock::time_point at) : at_(at) {}
      absl::Status Wait() override {
        std::this_thread::sleep_until(at_);
        return absl::OkStatus();
      }

     private:
      Clock::time_point at_;
    };
    return std::unique_ptr<Work>(new Done(Clock::now() + milliseconds(30)));
  }

 private:
  static absl::Status Sleep() {
    std::this_thread::sleep_for(milliseconds(20));
    return absl::OkStatus();
  }
};

TEST(TimedProcessGroupTest, CountsBlockingCallsAndTheUnhiddenPartOfWaits) {
  SlowGroup slow;
  TimedProcessGroup timed(&slow);
  Tensor t = Tensor::Zeros({4}, DType::kF32).value();
  ASSERT_TRUE(timed.AllReduce(t, ReduceOp::kSum).ok());
  EXPECT_GE(timed.blocked_seconds(), 0.020);
  EXPECT_EQ(timed.collectives(), 1);
  const double after_one = timed.blocked_seconds();

  // Started, then 60 ms of "compute" hide the whole 30 ms transfer: Wait adds ~nothing.
  auto work = timed.StartAllGather(t, t);
  ASSERT_TRUE(work.ok());
  std::this_thread::sleep_for(milliseconds(60));
  ASSERT_TRUE((*work)->Wait().ok());
  EXPECT_EQ(timed.collectives(), 2);
  EXPECT_LT(timed.blocked_seconds() - after_one, 0.030);

  // Waited for at once: the whole transfer is exposed.
  const double before = timed.blocked_seconds();
  work = timed.StartAllGather(t, t);
  ASSERT_TRUE(work.ok());
  ASSERT_TRUE((*work)->Wait().ok());
  EXPECT_GE(timed.blocked_seconds() - before, 0.029);

  timed.Reset();
  EXPECT_EQ(timed.blocked_seconds(), 0);
  EXPECT_EQ(timed.collectives(), 0);
}

}  // namespace
}  // namespace cctune
