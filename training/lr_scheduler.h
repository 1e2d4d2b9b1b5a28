// Learning-rate schedules as pure functions of the optimizer step, so a resumed run needs to
// store nothing but the step. Cosine with linear warmup follows torchtune's
// get_cosine_schedule_with_warmup (a LambdaLR stepped after every optimizer step):
//   step < warmup:  lr = base_lr * step / max(1, warmup)
//   otherwise:      progress = (step - warmup) / max(1, total - warmup)
//                   lr = base_lr * max(0, 0.5 * (1 + cos(pi * num_cycles * 2 * progress)))
// where `step` is the number of optimizer steps already taken (0 for the first update: with
// warmup, torchtune's first update runs at lr 0).
//
//   for (...) { opt->set_lr(schedule.Lr(base_lr, opt->step())); opt->Step(); }
#ifndef CCTUNE_TRAINING_LR_SCHEDULER_H_
#define CCTUNE_TRAINING_LR_SCHEDULER_H_

#include <cstdint>

#include "absl/status/statusor.h"

namespace cctune {

class CosineScheduleWithWarmup {
 public:
  // InvalidArgument for negative step counts or a non-finite / negative num_cycles.
  static absl::StatusOr<CosineScheduleWithWarmup> Create(int64_t num_warmup_steps,
                                                         int64_t num_training_steps,
                                                         double num_cycles = 0.5);
  // The factor applied to the base learning rate before update number `step` (0-based).
  double Multiplier(int64_t step) const;
  double Lr(double base_lr, int64_t step) const { return base_lr * Multiplier(step); }

  int64_t num_warmup_steps() const { return num_warmup_steps_; }
  int64_t num_training_steps() const { return num_training_steps_; }
  double num_cycles() const { return num_cycles_; }

 private:
  CosineScheduleWithWarmup(int64_t warmup, int64_t total, double cycles)
      : num_warmup_steps_(warmup), num_training_steps_(total), num_cycles_(cycles) {}
  int64_t num_warmup_steps_;
  int64_t num_training_steps_;
  double num_cycles_;
};

}  // namespace cctune

#endif  // CCTUNE_TRAINING_LR_SCHEDULER_H_
