// TransformerDecoder (torchtune's): token embedding, a stack of self-attention layers, a final
// norm and an output projection (Linear, or TiedLinear sharing the embedding table).
//
//   tokens [b, s] -> tok_embeddings -> layers... -> norm -> output -> logits [b, s, v] (f32)
//
// One Forward serves every mode. Training passes an Activations struct and the step's store
// (the trainer, training/decoder_trainer.h, fuses the output projection with the loss, so it
// calls ForwardHidden and then Backward); evaluation passes neither.
//
// Generation: SetupCaches() gives every layer a KV cache; from then on Forward requires a mask
// [b, s, cache_len] and input_pos [b, s], as torchtune validates, and each call appends s
// positions to the caches.
#ifndef CCTUNE_MODULES_TRANSFORMER_DECODER_H_
#define CCTUNE_MODULES_TRANSFORMER_DECODER_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "modules/activation_store.h"
#include "modules/attention.h"
#include "modules/embedding.h"
#include "modules/linear.h"
#include "modules/module.h"
#include "modules/rms_norm.h"
#include "modules/scratch.h"
#include "modules/transformer_self_attention_layer.h"

namespace cctune {

class TransformerDecoder : public Module {
 public:
  using Layers = std::vector<std::unique_ptr<TransformerSelfAttentionLayer>>;

  // Children "tok_embeddings", "layers.{i}", "norm", "output". `output` may be a TiedLinear
  // that refers to `tok_embeddings` (it then adds no parameters). InvalidArgument when a
  // piece is missing or the dims disagree.
  static absl::StatusOr<std::unique_ptr<TransformerDecoder>> Create(
      std::unique_ptr<Embedding> tok_embeddings, Layers layers, std::unique_ptr<RMSNorm> norm,
      std::unique_ptr<Projection> output, int64_t max_seq_len);

  int64_t vocab_size() const { return output_->out_dim(); }
  int64_t embed_dim() const { return tok_embeddings_->embedding_dim(); }
  int64_t max_seq_len() const { return max_seq_len_; }
  size_t num_layers() const { return layers_.size(); }
  const Embedding& tok_embeddings() const { return *tok_embeddings_; }
  TransformerSelfAttentionLayer& layer(size_t i) { return *layers_[i]; }
  const TransformerSelfAttentionLayer& layer(size_t i) const { return *layers_[i]; }
  const RMSNorm& norm() const { return *norm_; }
  const Projection& output() const { return *output_; }

  // KV caches for every layer, on the parameters' device. max_seq_len <= 0 means the
  // model's max_seq_len. FailedPrecondition if caches exist (DeleteCaches() first) or the
  // parameters are not materialised.
  absl::Status SetupCaches(int64_t batch_size, DType dtype, int64_t max_seq_len = -1,
                           KvCacheLayout layout = KvCacheLayout::kGrouped);
  bool CachesAreSetup() const;
  bool CachesAreEnabled() const { return CachesAreSetup(); }
  // Zeroes every cache and rewinds it to position 0. FailedPrecondition without caches.
  absl::Status ResetCaches();
  void DeleteCaches();
  // Filled positions of the caches (0 without caches).
  int64_t CacheSize() const;
  // Sum of Bytes() over every layer's cache.
  size_t KvCacheBytes() const;
  // Bytes of the inference forward's activation buffers, kept from call to call: the
  // decoder's own and the one set its layers share (modules/scratch.h), so the same for
  // 1 layer as for 32.
  size_t InferenceScratchBytes() const { return scratch_.Bytes() + layer_scratch_->Bytes(); }

  // What Backward reads, saved by a training forward; the buffers are kept from call to call.
  struct Activations {
    // Keep only each layer's input and recompute the layer in its Backward.
    bool checkpointing = false;
    std::vector<Tensor> hs;  // [b, s, d]: hs[l] is layer l's input, hs.back() the last output
    // One per layer, or one shared by all of them with checkpointing.
    std::vector<TransformerSelfAttentionLayer::Activations> layers;
  };

  // logits [b, s, v] (f32) = decoder(tokens [b, s] i32/i64). A logits tensor [b, s_out, v]
  // with 1 <= s_out < s receives the last s_out positions only (the final norm and output
  // projection skip the others), e.g. [b, 1, v] for the next token of a prompt.
  // mask: optional bool [b, s, s_kv]; input_pos: optional i32/i64 [b, s] (or [s]). Both are
  // required once caches are set up; the mask may then span the filled positions after this
  // call (CacheSize() + s) or the whole cache (its max_seq_len). Training passes `acts` and the
  // step's store (saved for Backward; no caches then); evaluation and generation pass neither.
  absl::Status Forward(Tensor& logits, const Tensor& tokens, const Tensor* mask = nullptr,
                       const Tensor* input_pos = nullptr, Activations* acts = nullptr,
                       ActivationStore* store = nullptr);
  // Forward without the output projection: hidden [b, s_out, d] (f32) = the final norm of the
  // last s_out positions. Training (acts and store) needs s_out = s and no caches.
  absl::Status ForwardHidden(Tensor& hidden, const Tensor& tokens, const Tensor* mask = nullptr,
                             const Tensor* input_pos = nullptr, Activations* acts = nullptr,
                             ActivationStore* store = nullptr);
  // From dhidden [b, s, d] (the gradient of ForwardHidden's output) down to the embedding:
  // the final norm's, then every layer's Backward in reverse, then the table's. Parameter
  // gradients are added to the store's views. tokens, mask and input_pos are the forward's.
  // `after_stage`, when set, runs as each part's parameter gradients are complete: with
  // num_layers() after the final norm's backward, i after layer i's, and -1 after the
  // table's (optimizer_in_bwd updates those parameters there; an error ends the backward).
  absl::Status Backward(const Tensor& dhidden, const Tensor& tokens, const Tensor* mask,
                        const Tensor* input_pos, Activations& acts, ActivationStore& store,
                        const std::function<absl::Status(int stage)>& after_stage = nullptr);
  // Data parallel with sharded parameters (distributed/fsdp.h): `hook(stage, backward)` runs
  // before each part reads its parameters: in ForwardHidden (training or not) before the
  // table (-1), layer i (i) and the final norm (num_layers()); in Backward before the final
  // norm's (num_layers()), layer i's (i) and the table's (-1), with backward = true. The
  // output projection is the caller's (stage num_layers() + 1, DecoderTrainer). An error ends
  // the call. Null (the default): none.
  using ParameterHook = std::function<absl::Status(int stage, bool backward)>;
  void set_parameter_hook(ParameterHook hook) { parameter_hook_ = std::move(hook); }
  bool has_parameter_hook() const { return static_cast<bool>(parameter_hook_); }
  absl::Status BeforeStage(int stage, bool backward) const {
    return parameter_hook_ ? parameter_hook_(stage, backward) : absl::OkStatus();
  }

  // A new f32 logits tensor on the parameters' device.
  absl::StatusOr<Tensor> operator()(const Tensor& tokens, const Tensor* mask = nullptr,
                                    const Tensor* input_pos = nullptr);

 private:
  TransformerDecoder(std::unique_ptr<Embedding> tok_embeddings, Layers layers,
                     std::unique_ptr<RMSNorm> norm, std::unique_ptr<Projection> output,
                     int64_t max_seq_len);
  absl::Status ValidateInputs(const Tensor& tokens, const Tensor* mask,
                              const Tensor* input_pos) const;

  std::unique_ptr<Embedding> tok_embeddings_;
  Layers layers_;
  std::unique_ptr<RMSNorm> norm_;
  std::unique_ptr<Projection> output_;
  int64_t max_seq_len_;
  Scratch scratch_;
  // One set of inference buffers for all the layers, which run one at a time (modules/scratch.h).
  std::shared_ptr<Scratch> layer_scratch_ = std::make_shared<Scratch>();
  ParameterHook parameter_hook_;
};

}  // namespace cctune

#endif  // CCTUNE_MODULES_TRANSFORMER_DECODER_H_
