#include "modules/transformer_self_attention_layer.h"

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "kernels/ops.h"

namespace cctune {

absl::StatusOr<std::unique_ptr<TransformerSelfAttentionLayer>>
TransformerSelfAttentionLayer::Create(std::unique_ptr<MultiHeadAttention> attn,
                                      std::unique_ptr<FeedForward> mlp,
                                      std::unique_ptr<RMSNorm> sa_norm,
                                      std::unique_ptr<RMSNorm> mlp_norm) {
  if (attn == nullptr || mlp == nullptr || sa_norm == nullptr || mlp_norm == nullptr) {
    return absl::InvalidArgumentError(
        "TransformerSelfAttentionLayer: attn, mlp, sa_norm and mlp_norm are required");
  }
  const int64_t d = attn->embed_dim();
  if (mlp->dim() != d || sa_norm->dim() != d || mlp_norm->dim() != d) {
    return absl::InvalidArgumentError(
        absl::StrCat("TransformerSelfAttentionLayer: attn embed_dim (", d, "), mlp dim (",
                     mlp->dim(), "), sa_norm dim (", sa_norm->dim(), ") and mlp_norm dim (",
                     mlp_norm->dim(), ") must be equal"));
  }
  return std::unique_ptr<TransformerSelfAttentionLayer>(new TransformerSelfAttentionLayer(
      std::move(attn), std::move(mlp), std::move(sa_norm), std::move(mlp_norm)));
}

TransformerSelfAttentionLayer::TransformerSelfAttentionLayer(
    std::unique_ptr<MultiHeadAttention> attn, std::unique_ptr<FeedForward> mlp,
    std::unique_ptr<RMSNorm> sa_norm, std::unique_ptr<RMSNorm> mlp_norm)
    : attn_(std::move(attn)),
      mlp_(std::move(mlp)),
      sa_norm_(std::move(sa_norm)),
      mlp_norm_(std::move(mlp_norm)) {
  RegisterModule("attn", attn_.get());
  RegisterModule("mlp", mlp_.get());
  RegisterModule("sa_norm", sa_norm_.get());
  RegisterModule("mlp_norm", mlp_norm_.get());
}

absl::Status TransformerSelfAttentionLayer::Forward(Tensor& out, const Tensor& x,
                                                    const Tensor* mask, const Tensor* input_pos,
                                                    Activations* acts, ActivationStore* store) {
  if (x.dim() != 3 || x.size(2) != embed_dim()) {
    return absl::InvalidArgumentError(
        absl::StrCat("TransformerSelfAttentionLayer: x must be "
                     "[b, s, ",
                     embed_dim(), "], got ", ShapeToString(x.shape())));
  }
  const Device& dev = x.device();
  // Training keeps both norms' outputs and h for the backward, and uses `out` as the
  // branches' temporary; otherwise one scratch buffer serves both norms.
  Tensor xn1, xn2, branch, h;
  if (acts != nullptr) {
    acts->holder = nullptr;
    CCTUNE_RETURN_IF_ERROR(EnsureF32(acts->xn1, x.shape(), dev));
    CCTUNE_RETURN_IF_ERROR(EnsureF32(acts->h1, x.shape(), dev));
    CCTUNE_RETURN_IF_ERROR(EnsureF32(acts->xn2, x.shape(), dev));
    xn1 = acts->xn1;
    xn2 = acts->xn2;
    h = acts->h1;
    branch = out;
  } else {
    CCTUNE_ASSIGN_OR_RETURN(xn1, scratch_.Get(0, x.shape(), DType::kF32, dev));
    xn2 = xn1;
    CCTUNE_ASSIGN_OR_RETURN(branch, scratch_.Get(1, x.shape(), DType::kF32, dev));
    CCTUNE_ASSIGN_OR_RETURN(h, scratch_.Get(2, x.shape(), DType::kF32, dev));
  }
  MultiHeadAttention::Activations* attn_acts = acts != nullptr ? &acts->attn : nullptr;
  FeedForward::Activations* mlp_acts = acts != nullptr ? &acts->mlp : nullptr;
  CCTUNE_RETURN_IF_ERROR(sa_norm_->Forward(xn1, x));  // [b, s, d]
  CCTUNE_RETURN_IF_ERROR(attn_->Forward(branch, xn1, mask, input_pos, attn_acts, store));
  // h = x + attn and xn2 = mlp_norm(h), one pass (fused residual add + norm).
  CCTUNE_RETURN_IF_ERROR(mlp_norm_->AddForward(h, xn2, x, branch));
  CCTUNE_RETURN_IF_ERROR(mlp_->Forward(branch, xn2, mlp_acts, store));
  // out = h + mlp; x is not read after this point.
  CCTUNE_RETURN_IF_ERROR(ops::Add(out, h, branch));
  if (acts != nullptr) acts->holder = this;
  return absl::OkStatus();
}

void TransformerSelfAttentionLayer::ShareScratch(const std::shared_ptr<Scratch>& pool) {
  constexpr size_t kOwnSlots = 3;  // xn1 (= xn2), branch, h
  scratch_.Share(pool, 0);
  attn_->ShareScratch(pool, kOwnSlots);
  mlp_->ShareScratch(pool, kOwnSlots + MultiHeadAttention::kScratchSlots);
}

absl::Status TransformerSelfAttentionLayer::Backward(Tensor& dh, const Tensor& x,
                                                     const Tensor* mask, const Tensor* input_pos,
                                                     Activations& acts, ActivationStore& store) {
  const Device& dev = x.device();
  if (acts.holder != this) {
    // Activation checkpointing: recompute this layer's activations from its saved input.
    CCTUNE_ASSIGN_OR_RETURN(Tensor out, store.Temp(StoreSlot::kLayerRecompute, x.shape(), dev));
    CCTUNE_RETURN_IF_ERROR(Forward(out, x, mask, input_pos, &acts, &store));
  }
  // Feed-forward block; dh holds d(out) and collects d(h1) (the residual passes it through).
  CCTUNE_ASSIGN_OR_RETURN(Tensor dxn, store.ZeroTemp(StoreSlot::kLayerDxn, x.shape(), dev));
  CCTUNE_RETURN_IF_ERROR(mlp_->Backward(dxn, dh, acts.mlp, store));
  CCTUNE_RETURN_IF_ERROR(mlp_norm_->Backward(dh, dxn, acts.h1, store));
  // Attention block; dh now holds d(h1) and collects d(x).
  CCTUNE_ASSIGN_OR_RETURN(dxn, store.ZeroTemp(StoreSlot::kLayerDxn, x.shape(), dev));
  CCTUNE_RETURN_IF_ERROR(attn_->Backward(dxn, dh, mask, input_pos, acts.attn, store));
  return sa_norm_->Backward(dh, dxn, x, store);
}

}  // namespace cctune
