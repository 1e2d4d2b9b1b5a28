// A ProcessGroup decorator that counts how long its caller is blocked in collectives: the
// whole of every blocking call (AllReduce, ReduceScatter, AllGather, Broadcast, Barrier) and
// of every Work::Wait() of a started one (the part of an overlapped all-gather that compute
// did not hide). That is the exposed, non-overlapped communication of a training step
// (benchmarks/dist_scaling_bench.cc; docs/distributed.md, "Scaling").
//
//   TimedProcessGroup timed(pg.get());
//   ... train with &timed ...
//   timed.blocked_seconds();  // of the caller's thread
#ifndef CCTUNE_DISTRIBUTED_TIMED_PROCESS_GROUP_H_
#define CCTUNE_DISTRIBUTED_TIMED_PROCESS_GROUP_H_

#include <cstdint>
#include <cstdlib>
#include <memory>

#include "distributed/process_group.h"

namespace cctune {

class TimedProcessGroup final : public ProcessGroup {
 public:
  // `inner` must outlive this group and every Work it starts.
  explicit TimedProcessGroup(ProcessGroup* inner) : inner_(inner) {}

  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  const char* backend() const override { return inner_->backend(); }
  std::string transport() const override { return inner_->transport(); }

  absl::Status AllReduce(Tensor& t, ReduceOp op) override;
  absl::Status ReduceScatter(const Tensor& input, Tensor& output, ReduceOp op) override;
  absl::Status AllGather(const Tensor& input, Tensor& output) override;
  absl::Status Broadcast(Tensor& t, int root) override;
  absl::Status Barrier() override;
  absl::StatusOr<std::unique_ptr<Work>> StartAllGather(const Tensor& input,
                                                       Tensor& output) override;
  absl::StatusOr<std::unique_ptr<Work>> StartReduceScatter(const Tensor& input, Tensor& output,
                                                           ReduceOp op) override;
  [[noreturn]] void Abort(const absl::Status& status) const override {
    inner_->Abort(status);
    std::abort();  // not reached: the inner group's Abort does not return
  }

  // Seconds blocked in collectives and the number of collectives since creation or Reset.
  // Not thread-safe: one calling thread, as the recipes have.
  double blocked_seconds() const { return blocked_seconds_; }
  int64_t collectives() const { return collectives_; }
  void Reset() {
    blocked_seconds_ = 0;
    collectives_ = 0;
  }
  // For the Work wrappers.
  void AddBlocked(double seconds) { blocked_seconds_ += seconds; }

 private:
  ProcessGroup* inner_;
  double blocked_seconds_ = 0;
  int64_t collectives_ = 0;
};

}  // namespace cctune

#endif  // CCTUNE_DISTRIBUTED_TIMED_PROCESS_GROUP_H_
