// LoRALinear: torchtune's low-rank adapter around a frozen Linear,
//   out = x · Wᵀ (+ b) + (alpha / rank) · (x · Aᵀ) · Bᵀ,
// with the base weight W [out, in] ("weight", "bias"), A = "lora_a.weight" [rank, in]
// (kaiming-uniform with a = sqrt(5), i.e. U(-1/sqrt(in), 1/sqrt(in))) and B = "lora_b.weight"
// [out, rank] (zeros), so a fresh adapter leaves the output unchanged. It IS a Linear, so it fits
// every place that takes one (q/k/v/output_proj, w1/w2/w3, the decoder's output); only the
// adapter is meant to be trained (modules/decoder_backward.h, LoRATrainableLayout).
// Dropout on the adapter's input (torchtune: lora_b(lora_a(dropout(x))) * scale, while the base
// path reads x itself): Forward is the evaluation forward (no dropout); ForwardWithDropout is
// the training one, which the trainer (modules/decoder_backward.h) calls with a Philox stream.
#ifndef CCTUNE_MODULES_LORA_LINEAR_H_
#define CCTUNE_MODULES_LORA_LINEAR_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "modules/linear.h"
#include "modules/module.h"

namespace cctune {

class LoRALinear : public Linear {
 public:
  LoRALinear(int64_t in_dim, int64_t out_dim, int64_t rank, double alpha, double dropout = 0.0,
             bool use_bias = false);

  int64_t rank() const { return rank_; }
  double alpha() const { return alpha_; }
  double dropout() const { return dropout_; }
  double scale() const { return alpha_ / static_cast<double>(rank_); }
  const Linear& lora_a() const { return lora_a_; }  // weight [rank, in]
  const Linear& lora_b() const { return lora_b_; }  // weight [out, rank]
  // After Merge() the adapter is folded into the base weight and no longer applied.
  bool merged() const { return merged_; }

  absl::Status Forward(Tensor& out, const Tensor& x) const override;
  // The training forward: the adapter reads ops::Dropout(x, dropout(), seed, offset) (element i
  // of x dropped by Philox word offset + i of stream `seed`), the base path x. With dropout()
  // 0 or after Merge() it is Forward.
  absl::Status ForwardWithDropout(Tensor& out, const Tensor& x, uint64_t seed,
                                  uint64_t offset) const;

  // W += scale · B · A (computed in fp64, stored in W's dtype); afterwards Forward uses W alone,
  // so this module computes what a plain Linear holding the merged weight computes.
  absl::Status Merge();

 private:
  // out += scale · B · A · x_adapter.
  absl::Status AddAdapter(Tensor& out, const Tensor& x_adapter) const;

  int64_t rank_;
  double alpha_;
  double dropout_;
  bool merged_ = false;
  Linear lora_a_;
  Linear lora_b_;
};

// Number of parameters of an adapter on an in -> out projection: rank · (in + out).
inline int64_t LoRAAdapterNumParameters(int64_t in_dim, int64_t out_dim, int64_t rank) {
  return rank * (in_dim + out_dim);
}

}  // namespace cctune

#endif  // CCTUNE_MODULES_LORA_LINEAR_H_
