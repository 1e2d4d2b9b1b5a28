// TiedLinear: an output projection that reuses an Embedding's table as its weight
// (logits = x · Eᵀ), as torchtune's TiedLinear does for Llama 3.2 and small Qwen 2.5 models.
// It owns no parameters, so the state dict has no "output.weight" and the table is counted
// once.
#ifndef CCTUNE_MODULES_TIED_LINEAR_H_
#define CCTUNE_MODULES_TIED_LINEAR_H_

#include "absl/status/status.h"
#include "core/tensor.h"
#include "modules/embedding.h"
#include "modules/linear.h"

namespace cctune {

class TiedLinear : public Projection {
 public:
  // `tied` must outlive this module (the decoder owns both).
  explicit TiedLinear(const Embedding* tied);

  int64_t in_dim() const override { return tied_->embedding_dim(); }
  int64_t out_dim() const override { return tied_->num_embeddings(); }
  const Embedding& tied_module() const { return *tied_; }

  // out [..., v] = x [..., d] · weightᵀ.
  using Projection::Forward;
  absl::Status Forward(Tensor& out, const Tensor& x, ActivationStore* store,
                       int64_t row0) const override;
  // Adds the gradient of the shared table to tok_embeddings.weight's view.
  absl::Status Backward(Tensor* dx, const Tensor& dy, const Tensor& x, ActivationStore& store,
                        int64_t row0) const override;

 private:
  const Embedding* tied_;
};

}  // namespace cctune

#endif  // CCTUNE_MODULES_TIED_LINEAR_H_
