#include "training/lr_scheduler.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace cctune {

absl::StatusOr<CosineScheduleWithWarmup> CosineScheduleWithWarmup::Create(
    int64_t num_warmup_steps, int64_t num_training_steps, double num_cycles) {
  if (num_warmup_steps < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cosine schedule: num_warmup_steps (", num_warmup_steps, ") must be >= 0"));
  }
  if (num_training_steps < 0) {
    return absl::InvalidArgumentError(absl::StrCat("cosine schedule: num_training_steps (",
                                                   num_training_steps, ") must be >= 0"));
  }
  if (!std::isfinite(num_cycles) || num_cycles < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cosine schedule: num_cycles (", num_cycles, ") must be >= 0"));
  }
  return CosineScheduleWithWarmup(num_warmup_steps, num_training_steps, num_cycles);
}

double CosineScheduleWithWarmup::Multiplier(int64_t step) const {
  if (step < num_warmup_steps_) {
    return static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, num_warmup_steps_));
  }
  const double progress =
      static_cast<double>(step - num_warmup_steps_) /
      static_cast<double>(std::max<int64_t>(1, num_training_steps_ - num_warmup_steps_));
  return std::max(0.0, 0.5 * (1.0 + std::cos(M_PI * num_cycles_ * 2.0 * progress)));
}

}  // namespace cctune
