#include "modules/transformer_decoder.h"

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "kernels/ops.h"

namespace cctune {

absl::StatusOr<std::unique_ptr<TransformerDecoder>> TransformerDecoder::Create(
    std::unique_ptr<Embedding> tok_embeddings, Layers layers, std::unique_ptr<RMSNorm> norm,
    std::unique_ptr<Projection> output, int64_t max_seq_len) {
  if (tok_embeddings == nullptr || norm == nullptr || output == nullptr) {
    return absl::InvalidArgumentError(
        "TransformerDecoder: tok_embeddings, norm and output are required");
  }
  if (max_seq_len <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("TransformerDecoder: max_seq_len (", max_seq_len, ") must be positive"));
  }
  const int64_t d = tok_embeddings->embedding_dim();
  for (size_t i = 0; i < layers.size(); ++i) {
    if (layers[i] == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("TransformerDecoder: layer ", i, " is null"));
    }
    if (layers[i]->embed_dim() != d) {
      return absl::InvalidArgumentError(absl::StrCat("TransformerDecoder: layer ", i,
                                                     " has embed_dim ", layers[i]->embed_dim(),
                                                     " but tok_embeddings has embedding_dim ", d));
    }
  }
  if (norm->dim() != d || output->in_dim() != d) {
    return absl::InvalidArgumentError(
        absl::StrCat("TransformerDecoder: embedding_dim (", d, "), norm dim (", norm->dim(),
                     ") and output in_dim (", output->in_dim(), ") must be equal"));
  }
  return std::unique_ptr<TransformerDecoder>(
      new TransformerDecoder(std::move(tok_embeddings), std::move(layers), std::move(norm),
                             std::move(output), max_seq_len));
}

TransformerDecoder::TransformerDecoder(std::unique_ptr<Embedding> tok_embeddings, Layers layers,
                                       std::unique_ptr<RMSNorm> norm,
                                       std::unique_ptr<Projection> output, int64_t max_seq_len)
    : tok_embeddings_(std::move(tok_embeddings)),
      layers_(std::move(layers)),
      norm_(std::move(norm)),
      output_(std::move(output)),
      max_seq_len_(max_seq_len) {
  RegisterModule("tok_embeddings", tok_embeddings_.get());
  for (size_t i = 0; i < layers_.size(); ++i) {
    RegisterModule(absl::StrCat("layers.", i), layers_[i].get());
    layers_[i]->ShareScratch(layer_scratch_);
  }
  RegisterModule("norm", norm_.get());
  RegisterModule("output", output_.get());
}

absl::Status TransformerDecoder::SetupCaches(int64_t batch_size, DType dtype, int64_t max_seq_len,
                                             KvCacheLayout layout) {
  if (CachesAreSetup()) {
    return absl::FailedPreconditionError(
        "TransformerDecoder::SetupCaches: caches are already set up; call DeleteCaches() "
        "first");
  }
  if (max_seq_len <= 0) max_seq_len = max_seq_len_;
  for (size_t i = 0; i < layers_.size(); ++i) {
    absl::Status s = layers_[i]->attn().SetupCache(batch_size, dtype, max_seq_len, layout);
    if (!s.ok()) {
      DeleteCaches();
      return absl::Status(s.code(), absl::StrCat("layer ", i, ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

bool TransformerDecoder::CachesAreSetup() const {
  return !layers_.empty() && layers_[0]->attn().HasCache();
}

absl::Status TransformerDecoder::ResetCaches() {
  if (!CachesAreSetup()) {
    return absl::FailedPreconditionError(
        "TransformerDecoder::ResetCaches: key value caches are not set up; call "
        "SetupCaches() first");
  }
  for (auto& layer : layers_) CCTUNE_RETURN_IF_ERROR(layer->attn().ResetCache());
  return absl::OkStatus();
}

void TransformerDecoder::DeleteCaches() {
  for (auto& layer : layers_) layer->attn().DeleteCache();
}

int64_t TransformerDecoder::CacheSize() const {
  return CachesAreSetup() ? layers_[0]->attn().kv_cache()->Size() : 0;
}

size_t TransformerDecoder::KvCacheBytes() const {
  size_t bytes = 0;
  for (const auto& layer : layers_) {
    if (layer->attn().kv_cache() != nullptr) bytes += layer->attn().kv_cache()->Bytes();
  }
  return bytes;
}

absl::Status TransformerDecoder::ValidateInputs(const Tensor& tokens, const Tensor* mask,
                                                const Tensor* input_pos) const {
  if (tokens.dim() != 2 || (tokens.dtype() != DType::kI64 && tokens.dtype() != DType::kI32)) {
    return absl::InvalidArgumentError(
        absl::StrCat("TransformerDecoder: tokens must be i32/i64 [b, s], got ",
                     DTypeName(tokens.dtype()), " ", ShapeToString(tokens.shape())));
  }
  const int64_t b = tokens.size(0), s = tokens.size(1);
  if (s > max_seq_len_) {
    return absl::InvalidArgumentError(absl::StrCat("TransformerDecoder: seq_len (", s,
                                                   ") of input tensor should be smaller than "
                                                   "max_seq_len (",
                                                   max_seq_len_, ")"));
  }
  if (input_pos != nullptr) {
    // [s] (the same positions for every row) is what packed training batches may pass.
    const bool ok = (input_pos->dim() == 2 && input_pos->size(0) == b && input_pos->size(1) == s) ||
                    (input_pos->dim() == 1 && input_pos->size(0) == s);
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat("TransformerDecoder: input_pos must be [", b,
                                                     ", ", s, "] (or [", s, "]), got ",
                                                     ShapeToString(input_pos->shape())));
    }
  }
  if (CachesAreSetup()) {
    if (mask == nullptr) {
      return absl::InvalidArgumentError(
          "TransformerDecoder: KV-caches for self-attention layers are set up for inference "
          "mode, causal masks must be provided! Use the `mask` arg to provide a causal mask.");
    }
    if (input_pos == nullptr) {
      return absl::InvalidArgumentError(
          "TransformerDecoder: KV-caches are set up for inference mode, input positions must "
          "be provided!");
    }
    // Checked here for all layers at once, so a failing call leaves every cache untouched.
    const KVCache& cache = *layers_[0]->attn().kv_cache();
    if (b > cache.batch_size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("TransformerDecoder: the caches were set up with a batch size of ",
                       cache.batch_size(), ", but tokens have batch size ", b));
    }
    CCTUNE_RETURN_IF_ERROR(cache.positions().Reserve(s).status());
  }
  return absl::OkStatus();
}

absl::Status TransformerDecoder::Forward(Tensor& logits, const Tensor& tokens, const Tensor* mask,
                                         const Tensor* input_pos, Activations* acts,
                                         ActivationStore* store) {
  CCTUNE_RETURN_IF_ERROR(ValidateInputs(tokens, mask, input_pos));
  const int64_t v = vocab_size();
  if ((logits.dim() != 3 || logits.size(0) != tokens.size(0) || logits.size(1) < 1 ||
       logits.size(1) > tokens.size(1) || logits.size(2) != v)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TransformerDecoder: logits must be f32 [", tokens.size(0), ", s_out, ", v,
        "] with 1 <= s_out <= s = ", tokens.size(1), ", got ", ShapeToString(logits.shape())));
  }
  // logits [b, s_out, v] with s_out < s asks for the last s_out positions only (generation
  // needs just the last one): the final norm and the output projection, which for a long
  // prompt and a large vocabulary cost as much as a whole layer, then run on those rows alone.
  const int64_t b = logits.size(0), s_out = logits.size(1);
  CCTUNE_ASSIGN_OR_RETURN(Tensor hidden, scratch_.Get(1, {b, s_out, embed_dim()}, DType::kF32,
                                                      tok_embeddings_->weight().device()));
  CCTUNE_RETURN_IF_ERROR(ForwardHidden(hidden, tokens, mask, input_pos, acts, store));
  return output_->Forward(logits, hidden, store, 0);  // [b, s_out, v]
}

absl::Status TransformerDecoder::ForwardHidden(Tensor& hidden, const Tensor& tokens,
                                               const Tensor* mask, const Tensor* input_pos,
                                               Activations* acts, ActivationStore* store) {
  CCTUNE_RETURN_IF_ERROR(ValidateInputs(tokens, mask, input_pos));
  const int64_t b = tokens.size(0), s = tokens.size(1), d = embed_dim();
  const Device& dev = tok_embeddings_->weight().device();
  if (hidden.dim() != 3 || hidden.size(0) != b || hidden.size(1) < 1 || hidden.size(1) > s ||
      hidden.size(2) != d) {
    return absl::InvalidArgumentError(
        absl::StrCat("TransformerDecoder: hidden must be f32 [", b, ", s_out, ", d,
                     "] with 1 <= s_out <= s = ", s, ", got ", ShapeToString(hidden.shape())));
  }
  const int64_t s_out = hidden.size(1);
  Tensor h;  // [b, s, d] the last layer's output
  if (acts != nullptr) {
    if (CachesAreSetup()) {
      return absl::FailedPreconditionError(
          "TransformerDecoder: a training forward does not use KV caches; call DeleteCaches() "
          "first");
    }
    // Every layer writes a buffer of its own, so each input survives until its Backward.
    const size_t num_layers = layers_.size();
    acts->hs.resize(num_layers + 1);
    for (Tensor& t : acts->hs) CCTUNE_RETURN_IF_ERROR(EnsureF32(t, {b, s, d}, dev));
    const size_t num_acts = acts->checkpointing ? 1 : num_layers;
    if (acts->layers.size() < num_acts) acts->layers.resize(num_acts);
    CCTUNE_RETURN_IF_ERROR(BeforeStage(-1, false));
    CCTUNE_RETURN_IF_ERROR(tok_embeddings_->Forward(acts->hs[0], tokens));  // [b, s, d]
    for (size_t i = 0; i < num_layers; ++i) {
      TransformerSelfAttentionLayer::Activations& la = acts->layers[acts->checkpointing ? 0 : i];
      CCTUNE_RETURN_IF_ERROR(BeforeStage(static_cast<int>(i), false));
      absl::Status st =
          layers_[i]->Forward(acts->hs[i + 1], acts->hs[i], mask, input_pos, &la, store);
      if (!st.ok()) return absl::Status(st.code(), absl::StrCat("layer ", i, ": ", st.message()));
    }
    h = acts->hs[num_layers];
  } else {
    CCTUNE_ASSIGN_OR_RETURN(h, scratch_.Get(0, {b, s, d}, DType::kF32, dev));
    CCTUNE_RETURN_IF_ERROR(BeforeStage(-1, false));
    CCTUNE_RETURN_IF_ERROR(tok_embeddings_->Forward(h, tokens));  // [b, s, d]
    for (size_t i = 0; i < layers_.size(); ++i) {
      CCTUNE_RETURN_IF_ERROR(BeforeStage(static_cast<int>(i), false));
      absl::Status st = layers_[i]->Forward(h, h, mask, input_pos);  // [b, s, d], in place
      if (!st.ok()) return absl::Status(st.code(), absl::StrCat("layer ", i, ": ", st.message()));
    }
  }
  CCTUNE_RETURN_IF_ERROR(BeforeStage(static_cast<int>(layers_.size()), false));
  if (s_out == s) return norm_->Forward(hidden, h);
  CCTUNE_ASSIGN_OR_RETURN(Tensor tail, h.Narrow(1, s - s_out, s_out));
  CCTUNE_RETURN_IF_ERROR(hidden.CopyFrom(tail));
  return norm_->Forward(hidden, hidden);
}

absl::Status TransformerDecoder::Backward(const Tensor& dhidden, const Tensor& tokens,
                                          const Tensor* mask, const Tensor* input_pos,
                                          Activations& acts, ActivationStore& store,
                                          const std::function<absl::Status(int)>& after_stage) {
  const size_t num_layers = layers_.size();
  const int64_t b = tokens.size(0), s = tokens.size(1), n = b * s, d = embed_dim();
  if (acts.hs.size() != num_layers + 1 || dhidden.shape() != Shape{b, s, d}) {
    return absl::FailedPreconditionError(absl::StrCat(
        "TransformerDecoder::Backward: needs the activations of a training forward of [", b,
        ", ", s, "] tokens and dhidden [", b, ", ", s, ", ", d, "], got ",
        ShapeToString(dhidden.shape())));
  }
  const Device& dev = tok_embeddings_->weight().device();
  // dh is the residual stream's gradient, from the last layer's output down.
  CCTUNE_ASSIGN_OR_RETURN(Tensor dh, store.ZeroTemp(StoreSlot::kDecoderDh, {b, s, d}, dev));
  {
    CCTUNE_ASSIGN_OR_RETURN(Tensor dh_rows, dh.View({n, d}));
    CCTUNE_ASSIGN_OR_RETURN(Tensor dy_rows, dhidden.View({n, d}));
    CCTUNE_ASSIGN_OR_RETURN(Tensor h_rows, acts.hs[num_layers].View({n, d}));
    CCTUNE_RETURN_IF_ERROR(BeforeStage(static_cast<int>(num_layers), true));
    CCTUNE_RETURN_IF_ERROR(norm_->Backward(dh_rows, dy_rows, h_rows, store));
  }
  if (after_stage) CCTUNE_RETURN_IF_ERROR(after_stage(static_cast<int>(num_layers)));
  for (size_t i = num_layers; i-- > 0;) {
    TransformerSelfAttentionLayer::Activations& la = acts.layers[acts.checkpointing ? 0 : i];
    CCTUNE_RETURN_IF_ERROR(BeforeStage(static_cast<int>(i), true));
    absl::Status st = layers_[i]->Backward(dh, acts.hs[i], mask, input_pos, la, store);
    if (!st.ok()) return absl::Status(st.code(), absl::StrCat("layer ", i, ": ", st.message()));
    if (after_stage) CCTUNE_RETURN_IF_ERROR(after_stage(static_cast<int>(i)));
  }
  CCTUNE_RETURN_IF_ERROR(BeforeStage(-1, true));
  CCTUNE_RETURN_IF_ERROR(tok_embeddings_->Backward(dh, tokens, store));
  if (after_stage) CCTUNE_RETURN_IF_ERROR(after_stage(-1));
  return absl::OkStatus();
}

absl::StatusOr<Tensor> TransformerDecoder::operator()(const Tensor& tokens, const Tensor* mask,
                                                      const Tensor* input_pos) {
  CCTUNE_RETURN_IF_ERROR(ValidateInputs(tokens, mask, input_pos));
  CCTUNE_ASSIGN_OR_RETURN(Tensor logits,
                          Tensor::Empty({tokens.size(0), tokens.size(1), vocab_size()}, DType::kF32,
                                        tok_embeddings_->weight().device()));
  CCTUNE_RETURN_IF_ERROR(Forward(logits, tokens, mask, input_pos));
  return logits;
}

}  // namespace cctune
