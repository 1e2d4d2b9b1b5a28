// One pre-norm decoder block (torchtune's TransformerSelfAttentionLayer):
//   h   = x + attn(sa_norm(x))
//   out = h + mlp(mlp_norm(h))
#ifndef CCTUNE_MODULES_TRANSFORMER_SELF_ATTENTION_LAYER_H_
#define CCTUNE_MODULES_TRANSFORMER_SELF_ATTENTION_LAYER_H_

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "modules/activation_store.h"
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

  // What Backward reads, saved by a training Forward (buffers kept from call to call).
  // With activation checkpointing every layer writes into one shared struct; `holder` says
  // whose activations it holds, and Backward recomputes them when they are another layer's.
  struct Activations {
    Tensor xn1;  // [b, s, d] sa_norm(x)
    MultiHeadAttention::Activations attn;
    Tensor h1;   // [b, s, d] x + attn(xn1)
    Tensor xn2;  // [b, s, d] mlp_norm(h1)
    FeedForward::Activations mlp;
    const TransformerSelfAttentionLayer* holder = nullptr;
  };

  // out [b, s, d] = layer(x [b, s, d]). mask/input_pos as in MultiHeadAttention::Forward.
  // Evaluation and generation pass no `acts`; out may then be x itself. Training passes
  // `acts` and the step's store; out must then be a buffer of its own (it doubles as the
  // branches' temporary) and x must stay unchanged until Backward.
  absl::Status Forward(Tensor& out, const Tensor& x, const Tensor* mask = nullptr,
                       const Tensor* input_pos = nullptr, Activations* acts = nullptr,
                       ActivationStore* store = nullptr);
  // dh: d(out) [b, s, d] on entry, d(x) on return; the parameters' gradients are added to the
  // store's views. x, mask and input_pos are the forward's. When `acts` holds another layer's
  // activations (checkpointing), this layer's forward is first recomputed into it with the
  // same ops, so the gradients are bit-identical to a run that kept everything.
  absl::Status Backward(Tensor& dh, const Tensor& x, const Tensor* mask, const Tensor* input_pos,
                        Activations& acts, ActivationStore& store);

  // The inference forward's buffers (this layer's three, then its attention's and its
  // feed-forward's) from now on come from `pool`, at the same slots for every layer that
  // shares it: layers that run one after another hold one set of activations between them
  // (TransformerDecoder does this for its layers; modules/scratch.h).
  void ShareScratch(const std::shared_ptr<Scratch>& pool);

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
