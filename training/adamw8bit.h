// AdamW with block-wise 8-bit moments: bitsandbytes' AdamW8bit (and PagedAdamW8bit, which is
// the same optimizer with its state in CUDA unified memory that can page out to the host).
// The update is kernels/cpu/adamw8bit.h's: each moment is one byte per element plus one f32
// absmax per block of 256, so the state is about 2.03 bytes per parameter instead of AdamW's
// 8 (bf16 parameters keep an f32 master copy, as AdamW does).
//
// Buffers with fewer than min_8bit_size elements keep f32 moments (bitsandbytes applies the
// same rule per parameter tensor; here a buffer is a whole arena) and are updated exactly as
// AdamW updates them.
//
// State tensors, by buffer (saved and restored bit-exactly with the recipe state):
//   "<buffer>.exp_avg_q8", "<buffer>.exp_avg_sq_q8"  the codes, 4 per i32 word (byte k of the
//       little-endian words is element k's code), ceil(n / 4) words
//   "<buffer>.exp_avg_absmax", "<buffer>.exp_avg_sq_absmax"  f32, one per block
//   "<buffer>.exp_avg", "<buffer>.exp_avg_sq"  f32 moments (buffers under min_8bit_size)
//   "<buffer>.master"  bf16 parameters' f32 master copy
//
// CPU only: buffers on another device are refused (Unimplemented) at Create.
#ifndef CCTUNE_TRAINING_ADAMW8BIT_H_
#define CCTUNE_TRAINING_ADAMW8BIT_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "training/optim.h"

namespace cctune {

struct AdamW8bitOptions {
  AdamWOptions adamw;
  int64_t min_8bit_size = 4096;
};

class AdamW8bit final : public Optimizer {
 public:
  // AdamW's argument checks, min_8bit_size >= 0, and CPU buffers.
  static absl::StatusOr<std::unique_ptr<AdamW8bit>> Create(std::vector<ParamBuffer> buffers,
                                                           const AdamW8bitOptions& options);
  const char* name() const override { return "adamw8bit"; }
  absl::Status Step() override;
  OptimizerState ExportState() const override;
  absl::Status ImportState(const OptimizerState& state) override;
  const AdamW8bitOptions& options() const { return options_; }
  // Whether buffer i holds 8-bit moments (false: f32, under min_8bit_size).
  bool Quantized(size_t i) const { return quantized_[i]; }

 private:
  AdamW8bit(std::vector<ParamBuffer> buffers, const AdamW8bitOptions& options)
      : Optimizer(std::move(buffers), options.adamw.lr), options_(options) {}
  AdamW8bitOptions options_;
  std::vector<bool> quantized_;
};

}  // namespace cctune

#endif  // CCTUNE_TRAINING_ADAMW8BIT_H_
