// One pre-norm decoder block (torchtune's TransformerSelfAttentionLayer):
//   h   = x + attn(sa_norm(x))
//   out = h + mlp(mlp_norm(h))
#ifndef CCTUNE_MODULES_TRANSFORMER_SELF_ATTENTION_LAYER_H_
#define CCTUNE_MODULES_TRANSFORMER_SELF_ATTENTION_LAYER_H_

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "modules/attention.h"
#include "modules/feed_forward.h"
#include "modules/module.h"
#include "modules/rms_norm.h"
#include "modules/scratch.h"

namespace cctune {

class TransformerSelfAttentionLayer : public Module {
 public:
  // Children "attn", "mlp", "sa_norm", "mlp_norm". InvalidArgument when a piece is missing
  // or the dims disagree (attn.embed_dim, mlp.dim and both norms' dim must be equal).
  static absl::StatusOr<std::unique_ptr<TransformerSelfAttentionLayer>> Create(
      std::unique_ptr<MultiHeadAttention> attn, std::unique_ptr<FeedForward> mlp,
      std::unique_ptr<RMSNorm> sa_norm, std::unique_ptr<RMSNorm> mlp_norm);

  int64_t embed_dim() const { return attn_->embed_dim(); }
  MultiHeadAttention& attn() { return *attn_; }
  const MultiHeadAttention& attn() const { return *attn_; }
  const FeedForward& mlp() const { return *mlp_; }
  const RMSNorm& sa_norm() const { return *sa_norm_; }
  const RMSNorm& mlp_norm() const { return *mlp_norm_; }

  // out [b, s, d] = layer(x [b, s, d]); out may be x itself. mask/input_pos as in
  // MultiHeadAttention::Forward.
  absl::Status Forward(Tensor& out, const Tensor& x, const Tensor* mask = nullptr,
                       const Tensor* input_pos = nullptr);

 private:
  TransformerSelfAttentionLayer(std::unique_ptr<MultiHeadAttention> attn,
                                std::unique_ptr<FeedForward> mlp, std::unique_ptr<RMSNorm> sa_norm,
                                std::unique_ptr<RMSNorm> mlp_norm);

  std::unique_ptr<MultiHeadAttention> attn_;
  std::unique_ptr<FeedForward> mlp_;
  std::unique_ptr<RMSNorm> sa_norm_;
  std::unique_ptr<RMSNorm> mlp_norm_;
  Scratch scratch_;
};

}  // namespace cctune

#endif  // CCTUNE_MODULES_TRANSFORMER_SELF_ATTENTION_LAYER_H_
