// LoRALinear: torchtune's low-rank adapter around a frozen Linear,
//   out = x · Wᵀ (+ b) + (alpha / rank) · (x · Aᵀ) · Bᵀ,
// with the base weight W [out, in] ("weight", "bias"), A = "lora_a.weight" [rank, in]
// (kaiming-uniform with a = sqrt(5), i.e. U(-1/sqrt(in), 1/sqrt(in))) and B = "lora_b.weight"
// [out, rank] (zeros), so a fresh adapter leaves the output unchanged. It IS a Linear, so it fits
// every place that takes one (q/k/v/output_proj, w1/w2/w3, the decoder's output); only the
// adapter is meant to be trained (training/decoder_trainer.h, LoRATrainableLayout).
// With quantize_base the base is NF4 (QLoRA; modules/nf4_linear.h).
// Dropout on the adapter's input (torchtune: lora_b(lora_a(dropout(x))) * scale, while the base
// path reads x itself) applies when Forward gets a store that names this adapter's mask for
// the step (ActivationStore::SetDropout); evaluation passes no store and drops nothing.
#ifndef CCTUNE_MODULES_LORA_LINEAR_H_
#define CCTUNE_MODULES_LORA_LINEAR_H_

#include <cstdint>
#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "modules/linear.h"
#include "modules/module.h"
#include "modules/nf4_linear.h"

namespace cctune {

class LoRALinear : public Linear {
 public:
  // quantize_base (QLoRA, torchtune's LoRALinear(quantize_base=True)): the frozen base weight
  // is held in NF4 (modules/nf4_linear.h: "weight" i32 codes and the child "nf4"), dequantized
  // on the fly in Forward and Backward; the adapter stays in the run's dtype. The caller
  // checks the shape first (CheckNf4Shape).
  LoRALinear(int64_t in_dim, int64_t out_dim, int64_t rank, double alpha, double dropout = 0.0,
             bool use_bias = false, bool quantize_base = false);

  int64_t rank() const { return rank_; }
  double alpha() const { return alpha_; }
  double dropout() const { return dropout_; }
  double scale() const { return alpha_ / static_cast<double>(rank_); }
  const Linear& lora_a() const { return lora_a_; }  // weight [rank, in]
  const Linear& lora_b() const { return lora_b_; }  // weight [out, rank]
  // The NF4 base (quantize_base), or null.
  const Nf4Weight* nf4() const { return nf4_.get(); }
  // After Merge() the adapter is folded into the base weight and no longer applied.
  bool merged() const { return merged_; }

  // With a store that holds a dropout mask for this adapter (seed, offset), the adapter reads
  // ops::Dropout(x, dropout(), seed, offset + row0 · in) (element i of x's rows dropped by
  // Philox word offset + row0 · in + i of stream `seed`), the base path x. With dropout() 0,
  // no mask or after Merge() no dropout applies. The store's temporaries hold the adapter's
  // intermediates (none are allocated per call).
  using Projection::Forward;
  absl::Status Forward(Tensor& out, const Tensor& x, ActivationStore* store,
                       int64_t row0) const override;
  // The base weight's backward (its gradients unless frozen) plus the adapter's: lora_a and
  // lora_b gradients (unless frozen) and its part of dx. The dropout mask is regenerated from
  // the store's (seed, offset) rather than saved by the forward.
  absl::Status Backward(Tensor* dx, const Tensor& dy, const Tensor& x, ActivationStore& store,
                        int64_t row0) const override;

  // W += scale · B · A (computed in fp64, stored in W's dtype); afterwards Forward uses W alone,
  // so this module computes what a plain Linear holding the merged weight computes.
  // FailedPrecondition for an NF4 base (merge the dequantized weights instead:
  // models/qlora.h DequantizedStateDict).
  absl::Status Merge();

 private:
  // out += scale · B · A · x_adapter.
  absl::Status AddAdapter(Tensor& out, const Tensor& x_adapter, ActivationStore* store) const;
  // This step's first mask word for x's rows, or null when no dropout applies.
  std::optional<uint64_t> DropoutOffset(const ActivationStore* store, int64_t row0) const;

  int64_t rank_;
  double alpha_;
  double dropout_;
  bool merged_ = false;
  std::unique_ptr<Nf4Weight> nf4_;
  Linear lora_a_;
  Linear lora_b_;
};

// Number of parameters of an adapter on an in -> out projection: rank · (in + out).
inline int64_t LoRAAdapterNumParameters(int64_t in_dim, int64_t out_dim, int64_t rank) {
  return rank * (in_dim + out_dim);
}

}  // namespace cctune

#endif  // CCTUNE_MODULES_LORA_LINEAR_H_
