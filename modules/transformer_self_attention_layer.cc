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
                                                    const Tensor* mask, const Tensor* input_pos) {
  if (x.dim() != 3 || x.size(2) != embed_dim()) {
    return absl::InvalidArgumentError(
        absl::StrCat("TransformerSelfAttentionLayer: x must be "
                     "[b, s, ",
                     embed_dim(), "], got ", ShapeToString(x.shape())));
  }
  const Device& dev = x.device();
  CCTUNE_ASSIGN_OR_RETURN(Tensor normed, scratch_.Get(0, x.shape(), DType::kF32, dev));
  CCTUNE_ASSIGN_OR_RETURN(Tensor branch, scratch_.Get(1, x.shape(), DType::kF32, dev));
  CCTUNE_ASSIGN_OR_RETURN(Tensor h, scratch_.Get(2, x.shape(), DType::kF32, dev));
  CCTUNE_RETURN_IF_ERROR(sa_norm_->Forward(normed, x));                     // [b, s, d]
  CCTUNE_RETURN_IF_ERROR(attn_->Forward(branch, normed, mask, input_pos));  // [b, s, d]
  CCTUNE_RETURN_IF_ERROR(ops::Add(h, branch, x));                           // h = x + attn
  CCTUNE_RETURN_IF_ERROR(mlp_norm_->Forward(normed, h));
  CCTUNE_RETURN_IF_ERROR(mlp_->Forward(branch, normed));
  return ops::Add(out, h, branch);  // out = h + mlp; x is not read after this point
}

}  // namespace cctune
