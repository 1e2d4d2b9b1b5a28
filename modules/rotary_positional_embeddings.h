// Rotary positional embeddings (RoPE) with torchtune's three flavours in one module:
//   - RotaryPositionalEmbeddings: interleaved pairs (2i, 2i+1), e.g. base 10000 (Llama 2);
//   - Llama3ScaledRoPE: the same with Llama 3.1 frequency scaling (ops::RopeScaling);
//   - Qwen2RotaryPositionalEmbeddings: half-split pairs (i, i + h_d/2).
// The cos/sin tables [max_seq_len, h_d/2] (f32) are built once, on the device of the first
// input (or by Setup()), so building a model on the meta device allocates nothing. One
// instance is usually shared by every attention layer, as torchtune's builders do.
#ifndef CCTUNE_MODULES_ROTARY_POSITIONAL_EMBEDDINGS_H_
#define CCTUNE_MODULES_ROTARY_POSITIONAL_EMBEDDINGS_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "core/device.h"
#include "core/tensor.h"
#include "kernels/op_types.h"
#include "modules/module.h"

namespace cctune {

class RotaryPositionalEmbeddings : public Module {
 public:
  // `dim` is the head dim (even). No parameters.
  RotaryPositionalEmbeddings(int64_t dim, int64_t max_seq_len = 4096, double base = 10000.0,
                             ops::RopePairing pairing = ops::RopePairing::kInterleaved,
                             std::optional<ops::RopeScaling> scaling = std::nullopt);

  int64_t dim() const { return dim_; }
  int64_t max_seq_len() const { return max_seq_len_; }
  double base() const { return base_; }
  ops::RopePairing pairing() const { return pairing_; }
  // Which pairs rotate from now on. The cos/sin tables serve both pairings (pair i turns by
  // angle i either way), so nothing is rebuilt. Used to run HF q/k weights as stored
  // (half-split) in a model built for interleaved pairs; Forward and Backward both follow it.
  void set_pairing(ops::RopePairing pairing) { pairing_ = pairing; }
  const std::optional<ops::RopeScaling>& scaling() const { return scaling_; }

  // Builds the cos/sin tables on `device` unless they are there already (no-op on meta).
  absl::Status Setup(const Device& device);
  // f32 [max_seq_len, h_d/2]; undefined before Setup.
  const Tensor& cos() const { return cos_; }
  const Tensor& sin() const { return sin_; }

  // out = x [b, s, n, h_d] rotated by the angles at input_pos ([b, s] or [s], i32/i64);
  // without input_pos, token i sits at position i. out may be x itself.
  absl::Status Forward(Tensor& out, const Tensor& x, const Tensor* input_pos = nullptr);
  // dx = the rotation's transpose applied to dy [b, s, n, h_d] (dx may be dy itself).
  absl::Status Backward(Tensor& dx, const Tensor& dy, const Tensor* input_pos = nullptr);

 private:
  // The positions of x [b, s, n, h_d]: *input_pos, or 0..s-1 (a view of positions_).
  absl::StatusOr<Tensor> Positions(const Tensor& x, const Tensor* input_pos);

  int64_t dim_;
  int64_t max_seq_len_;
  double base_;
  ops::RopePairing pairing_;
  std::optional<ops::RopeScaling> scaling_;
  Tensor cos_;        // [max_seq_len, h_d/2]
  Tensor sin_;        // [max_seq_len, h_d/2]
  Tensor positions_;  // i64 [max_seq_len]: 0, 1, 2, ... for calls without input_pos
};

}  // namespace cctune

#endif  // CCTUNE_MODULES_ROTARY_POSITIONAL_EMBEDDINGS_H_
