#include "training/decoder_trainer.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/dtype.h"
#include "core/status.h"
#include "kernels/cpu/op_profile.h"
#include "kernels/ops.h"
#include "modules/attention.h"
#include "modules/feed_forward.h"
#include "modules/lora_linear.h"
#include "modules/tied_linear.h"
#include "modules/transformer_self_attention_layer.h"

namespace cctune {

// The buffers every call reuses: the decoder's saved activations, the final norm's output and
// its gradient, the logits chunk and the per-chunk losses. A step of the same shapes as the
// last one allocates nothing.
struct DecoderTrainer::Workspace {
  TransformerDecoder::Activations acts;
  Tensor xnf;          // [b, s, d] the final norm's output
  Tensor dxnf;         // [b, s, d] its gradient
  Tensor logits_buf;   // [chunk, v]
  Tensor chunk_losses; // [num_chunks]
  Tensor num_valid;    // i64 []
};

struct DecoderTrainer::Batch {
  int64_t b = 0, s = 0;
  Tensor tokens;     // [b, s]
  Tensor labels;     // [b·s]
  Tensor mask;       // bool [b, s, s]; undefined without one
  bool has_mask = false;
  Tensor positions;  // [b, s] or [s]; undefined without them (RoPE then uses 0..s-1)
  bool has_positions = false;
  Device device = Device::Cpu();

  const Tensor* Mask() const { return has_mask ? &mask : nullptr; }
  const Tensor* Positions() const { return has_positions ? &positions : nullptr; }
};

namespace {

bool IsIndex(DType t) { return t == DType::kI32 || t == DType::kI64; }

// result->loss_sum += the chunks' f32 losses, in order, in fp64 (one read from the device;
// none to a new buffer on the host).
absl::Status AddChunkLosses(const Tensor& chunk_losses, LossSum* result) {
  if (chunk_losses.device().is_cpu() && chunk_losses.is_contiguous()) {
    const float* p = chunk_losses.data<float>();
    for (int64_t i = 0; i < chunk_losses.numel(); ++i) result->loss_sum += p[i];
    return absl::OkStatus();
  }
  CCTUNE_ASSIGN_OR_RETURN(std::vector<float> ls, chunk_losses.ToFloatVector());
  for (float l : ls) result->loss_sum += l;
  return absl::OkStatus();
}

}  // namespace

int64_t OutputChunkRows(const DecoderTrainerOptions& options, int64_t rows, int64_t vocab_size) {
  int64_t chunk = options.logits_chunk_rows;
  if (options.num_output_chunks > 0) {
    chunk = (rows + options.num_output_chunks - 1) / options.num_output_chunks;
  } else if (chunk <= 0) {
    chunk = (int64_t{1} << 24) / std::max<int64_t>(vocab_size, 1);
  }
  return std::max<int64_t>(1, std::min(chunk, rows));
}

absl::Status DecoderTrainer::SetNumOutputChunks(int64_t n) {
  if (n < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("DecoderTrainer: num_output_chunks must be >= 0, got ", n));
  }
  options_.num_output_chunks = n;
  if (n > 0) options_.logits_chunk_rows = 0;
  return absl::OkStatus();
}

absl::StatusOr<int64_t> CountValidLabels(const Tensor& labels) {
  if (!IsIndex(labels.dtype())) {
    return absl::InvalidArgumentError(
        absl::StrCat("CountValidLabels: labels must be i32/i64, got ", DTypeName(labels.dtype())));
  }
  auto count = [](const auto* p, int64_t n) {
    int64_t c = 0;
    for (int64_t i = 0; i < n; ++i) c += p[i] != ops::kIgnoreIndex;
    return c;
  };
  // The recipes' labels are on the host: counted in place, with no copy.
  if (labels.device().is_cpu() && labels.is_contiguous()) {
    return labels.dtype() == DType::kI64 ? count(labels.data<int64_t>(), labels.numel())
                                         : count(labels.data<int32_t>(), labels.numel());
  }
  CCTUNE_ASSIGN_OR_RETURN(std::vector<int64_t> values, labels.ToInt64Vector());
  return count(values.data(), static_cast<int64_t>(values.size()));
}

DecoderTrainer::DecoderTrainer(TransformerDecoder* model, DecoderTrainerOptions options)
    : model_(model), options_(options) {}

DecoderTrainer::~DecoderTrainer() = default;

absl::StatusOr<std::unique_ptr<DecoderTrainer>> DecoderTrainer::Create(
    TransformerDecoder* model, const ParameterArena* grads, DecoderTrainerOptions options) {
  if (model == nullptr || grads == nullptr) {
    return absl::InvalidArgumentError("DecoderTrainer: model and grads must not be null");
  }
  return Create(model, grads->named_tensors(), options);
}

absl::StatusOr<std::unique_ptr<DecoderTrainer>> DecoderTrainer::Create(
    TransformerDecoder* model, const std::vector<std::pair<std::string, Tensor>>& grad_list,
    DecoderTrainerOptions options) {
  if (model == nullptr) {
    return absl::InvalidArgumentError("DecoderTrainer: model must not be null");
  }
  std::map<std::string, Tensor> grad_map(grad_list.begin(), grad_list.end());
  if (options.num_output_chunks < 0 || options.logits_chunk_rows < 0 ||
      (options.num_output_chunks > 0 && options.logits_chunk_rows > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DecoderTrainer: num_output_chunks (", options.num_output_chunks,
        ") and logits_chunk_rows (", options.logits_chunk_rows,
        ") must be >= 0, and at most one of them set"));
  }
  if (!model->IsMaterialized()) {
    return absl::FailedPreconditionError(
        "DecoderTrainer: the model's parameters are not materialised (create a ParameterArena)");
  }
  for (size_t l = 0; l < model->num_layers(); ++l) {
    const MultiHeadAttention& attn = model->layer(l).attn();
    if (attn.q_norm() != nullptr || attn.k_norm() != nullptr) {
      return absl::UnimplementedError(
          absl::StrCat("DecoderTrainer: layers.", l, ".attn has q_norm/k_norm, which the "
                       "training backward does not support yet"));
    }
  }
  std::unique_ptr<DecoderTrainer> t(new DecoderTrainer(model, options));
  for (const auto& [name, param] : model->NamedParameters()) {
    auto found = grad_map.find(name);
    if (found == grad_map.end() && options.frozen_if_missing) continue;
    if (found == grad_map.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("DecoderTrainer: no gradient for parameter ", name, " in the grads arena"));
    }
    const Tensor& g = found->second;
    if (g.dtype() != DType::kF32 || g.shape() != param->value.shape()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "DecoderTrainer: gradient of ", name, " must be f32 ", ShapeToString(param->value.shape()),
          ", got ", DTypeName(g.dtype()), " ", ShapeToString(g.shape())));
    }
    t->store_.SetGrad(param->value, g);
  }
  // The adapters with dropout, in the order their masks are drawn (see the header).
  auto note_dropout = [&t](const Linear& l, const std::string& what) -> absl::Status {
    const auto* lora = dynamic_cast<const LoRALinear*>(&l);
    if (lora == nullptr || lora->dropout() == 0.0) return absl::OkStatus();
    if (!(lora->dropout() > 0.0 && lora->dropout() < 1.0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "DecoderTrainer: ", what, " has lora_dropout ", lora->dropout(), "; expected [0, 1)"));
    }
    t->dropout_adapters_.push_back(lora);
    return absl::OkStatus();
  };
  for (size_t l = 0; l < model->num_layers(); ++l) {
    const TransformerSelfAttentionLayer& layer = model->layer(l);
    const std::string p = absl::StrCat("layers.", l, ".");
    CCTUNE_RETURN_IF_ERROR(note_dropout(layer.attn().q_proj(), p + "attn.q_proj"));
    CCTUNE_RETURN_IF_ERROR(note_dropout(layer.attn().k_proj(), p + "attn.k_proj"));
    CCTUNE_RETURN_IF_ERROR(note_dropout(layer.attn().v_proj(), p + "attn.v_proj"));
    CCTUNE_RETURN_IF_ERROR(note_dropout(layer.attn().output_proj(), p + "attn.output_proj"));
    CCTUNE_RETURN_IF_ERROR(note_dropout(layer.mlp().w1(), p + "mlp.w1"));
    CCTUNE_RETURN_IF_ERROR(note_dropout(layer.mlp().w2(), p + "mlp.w2"));
    CCTUNE_RETURN_IF_ERROR(note_dropout(layer.mlp().w3(), p + "mlp.w3"));
  }
  const Projection& out = model->output();
  if (const auto* lin = dynamic_cast<const Linear*>(&out)) {
    CCTUNE_RETURN_IF_ERROR(note_dropout(*lin, "output"));
  } else if (dynamic_cast<const TiedLinear*>(&out) == nullptr) {
    return absl::UnimplementedError(
        "DecoderTrainer: the output projection must be a Linear or a TiedLinear");
  }
  return t;
}

void DecoderTrainer::AssignDropoutOffsets(int64_t rows) {
  store_.ClearDropout();
  Generator& gen = *generator_;
  const uint64_t seed = gen.seed();
  uint64_t next = gen.offset();
  bool any = false;
  for (const LoRALinear* lora : dropout_adapters_) {
    if (lora->merged()) continue;  // merged after Create: the adapter is no longer applied
    store_.SetDropout(lora, seed, next);
    next += static_cast<uint64_t>(rows) * static_cast<uint64_t>(lora->in_dim());
    any = true;
  }
  if (any) gen.SetState(seed, next);
}

absl::StatusOr<DecoderTrainer::Batch> DecoderTrainer::PrepareBatch(const Tensor& tokens,
                                                                   const Tensor& labels,
                                                                   const Tensor* mask,
                                                                   const Tensor* input_pos) const {
  Batch bt;
  bt.device = model_->tok_embeddings().weight().device();
  if (tokens.dim() != 2 || !IsIndex(tokens.dtype())) {
    return absl::InvalidArgumentError(absl::StrCat("DecoderTrainer: tokens must be i32/i64 [b, s], got ",
                                                   DTypeName(tokens.dtype()), " ",
                                                   ShapeToString(tokens.shape())));
  }
  bt.b = tokens.size(0);
  bt.s = tokens.size(1);
  if (bt.s > model_->max_seq_len()) {
    return absl::InvalidArgumentError(absl::StrCat("DecoderTrainer: sequence length ", bt.s,
                                                   " exceeds max_seq_len ", model_->max_seq_len()));
  }
  if (labels.shape() != tokens.shape() || !IsIndex(labels.dtype())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "DecoderTrainer: labels must be i32/i64 ", ShapeToString(tokens.shape()), ", got ",
        DTypeName(labels.dtype()), " ", ShapeToString(labels.shape())));
  }
  // The batch moves to the model's device (no copy when it is already there): the data loader
  // collates on the host, the trainer runs where the weights are.
  CCTUNE_ASSIGN_OR_RETURN(bt.tokens, tokens.To(bt.device));
  CCTUNE_ASSIGN_OR_RETURN(bt.labels, labels.To(bt.device));
  CCTUNE_ASSIGN_OR_RETURN(bt.labels, bt.labels.Reshape({bt.b * bt.s}));
  if (mask != nullptr) {
    if (mask->dtype() != DType::kBool || mask->shape() != Shape{bt.b, bt.s, bt.s}) {
      return absl::InvalidArgumentError(
          absl::StrCat("DecoderTrainer: mask must be bool [", bt.b, ", ", bt.s, ", ", bt.s,
                       "], got ", DTypeName(mask->dtype()), " ", ShapeToString(mask->shape())));
    }
    CCTUNE_ASSIGN_OR_RETURN(bt.mask, mask->To(bt.device));
    bt.has_mask = true;
  }
  if (input_pos != nullptr) {
    const bool ok = IsIndex(input_pos->dtype()) &&
                    (input_pos->shape() == tokens.shape() || input_pos->shape() == Shape{bt.s});
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat(
          "DecoderTrainer: input_pos must be i32/i64 [b, s] or [s] with [b, s] = ",
          ShapeToString(tokens.shape()), ", got ", DTypeName(input_pos->dtype()), " ",
          ShapeToString(input_pos->shape())));
    }
    CCTUNE_ASSIGN_OR_RETURN(bt.positions, input_pos->To(bt.device));
    bt.has_positions = true;
  }
  return bt;
}

absl::StatusOr<LossSum> DecoderTrainer::Run(const Tensor& tokens, const Tensor& labels,
                                            const Tensor* mask, const Tensor* input_pos,
                                            bool backward, double normalizer) {
  std::optional<cpu::ScopedOpTimer> data_timer(std::in_place, cpu::OpCategory::kData, 0, 0);
  CCTUNE_ASSIGN_OR_RETURN(Batch bt, PrepareBatch(tokens, labels, mask, input_pos));
  data_timer.reset();
  const int64_t b = bt.b, s = bt.s, n = b * s, d = model_->embed_dim();
  const int64_t v = model_->vocab_size();
  const Device& dev = bt.device;
  // This step's LoRA dropout masks (training only; the recompute of activation checkpointing
  // and the backward reuse them).
  store_.ClearDropout();
  if (backward) AssignDropoutOffsets(b * s);
  ActivationStore* store = backward ? &store_ : nullptr;

  // 1. The decoder's forward up to the final norm, saving activations when training.
  const auto t_start = std::chrono::steady_clock::now();
  if (ws_ == nullptr) ws_ = std::make_unique<Workspace>();
  Workspace& ws = *ws_;
  ws.acts.checkpointing = options_.activation_checkpointing;
  CCTUNE_RETURN_IF_ERROR(EnsureF32(ws.xnf, {b, s, d}, dev));
  CCTUNE_RETURN_IF_ERROR(model_->ForwardHidden(ws.xnf, bt.tokens, bt.Mask(), bt.Positions(),
                                               backward ? &ws.acts : nullptr, store));
  const auto t_forward = std::chrono::steady_clock::now();
  CCTUNE_ASSIGN_OR_RETURN(Tensor xnf, ws.xnf.View({n, d}));

  // The loss's normaliser must be known before the fused backward of the output chunks.
  // Counted on the caller's labels: free when they are on the host (the recipes' case), one
  // copy when they were passed on the device.
  LossSum result;
  data_timer.emplace(cpu::OpCategory::kData, 0, 0);
  CCTUNE_ASSIGN_OR_RETURN(result.num_valid, CountValidLabels(labels));
  data_timer.reset();
  if (normalizer <= 0) normalizer = static_cast<double>(result.num_valid);
  // With sharded parameters every rank runs the backward's collectives, labels or not.
  const bool do_backward = backward && (result.num_valid > 0 || model_->has_parameter_hook());

  // 2. Fused output projection + cross-entropy (+ its backward), by row chunks.
  CCTUNE_RETURN_IF_ERROR(model_->BeforeStage(static_cast<int>(model_->num_layers()) + 1, false));
  const Projection& output = model_->output();
  const int64_t chunk = OutputChunkRows(options_, n, v);
  CCTUNE_RETURN_IF_ERROR(EnsureF32(ws.logits_buf, {chunk, v}, dev));
  Tensor dxnf;
  if (do_backward) {
    CCTUNE_RETURN_IF_ERROR(EnsureF32(ws.dxnf, {b, s, d}, dev));
    CCTUNE_RETURN_IF_ERROR(ZeroInPlace(ws.dxnf, &store_));
    CCTUNE_ASSIGN_OR_RETURN(dxnf, ws.dxnf.View({n, d}));
  }
  // Each chunk's loss goes to its own slot on the model's device; they are read back once,
  // after the whole backward is queued (one host sync per call), and summed in chunk order in
  // fp64 as the chunks come.
  const int64_t num_chunks = n > 0 ? (n + chunk - 1) / chunk : 0;
  last_num_output_chunks_ = num_chunks;
  CCTUNE_RETURN_IF_ERROR(EnsureF32(ws.chunk_losses, {num_chunks}, dev));
  if (!ws.num_valid.defined() || ws.num_valid.device() != dev) {
    CCTUNE_ASSIGN_OR_RETURN(ws.num_valid, Tensor::Empty({}, DType::kI64, dev));
  }
  for (int64_t r0 = 0; r0 < n; r0 += chunk) {
    const int64_t rows = std::min(chunk, n - r0);
    CCTUNE_ASSIGN_OR_RETURN(Tensor logits, ws.logits_buf.Narrow(0, 0, rows));
    CCTUNE_ASSIGN_OR_RETURN(Tensor x_rows, xnf.Narrow(0, r0, rows));
    CCTUNE_ASSIGN_OR_RETURN(Tensor targets, bt.labels.Narrow(0, r0, rows));
    CCTUNE_RETURN_IF_ERROR(output.Forward(logits, x_rows, store, r0));
    CCTUNE_ASSIGN_OR_RETURN(Tensor loss_sum, ws.chunk_losses.Select(0, r0 / chunk));
    CCTUNE_RETURN_IF_ERROR(
        ops::CrossEntropyForward(loss_sum, ws.num_valid, nullptr, logits, targets));
    if (do_backward) {
      CCTUNE_RETURN_IF_ERROR(ops::CrossEntropyBackward(logits, logits, targets,
                                                       static_cast<float>(1.0 / normalizer)));
      CCTUNE_ASSIGN_OR_RETURN(Tensor dx_rows, dxnf.Narrow(0, r0, rows));
      CCTUNE_RETURN_IF_ERROR(output.Backward(&dx_rows, logits, x_rows, store_, r0));
    }
  }
  // 3. The decoder's backward: final norm, layers in reverse, embedding.
  if (do_backward) {
    if (grad_ready_) {
      CCTUNE_RETURN_IF_ERROR(grad_ready_(static_cast<int>(model_->num_layers()) + 1));
    }
    CCTUNE_RETURN_IF_ERROR(model_->Backward(ws.dxnf, bt.tokens, bt.Mask(), bt.Positions(),
                                            ws.acts, store_, grad_ready_));
  }
  CCTUNE_RETURN_IF_ERROR(AddChunkLosses(ws.chunk_losses, &result));
  const auto t_end = std::chrono::steady_clock::now();
  result.forward_seconds = std::chrono::duration<double>(t_forward - t_start).count();
  result.rest_seconds = std::chrono::duration<double>(t_end - t_forward).count();
  return result;
}

absl::StatusOr<LossSum> DecoderTrainer::ForwardBackward(const Tensor& tokens,
                                                        const Tensor& labels, const Tensor* mask,
                                                        const Tensor* input_pos,
                                                        double normalizer) {
  return Run(tokens, labels, mask, input_pos, /*backward=*/true, normalizer);
}

absl::StatusOr<LossSum> DecoderTrainer::Loss(const Tensor& tokens, const Tensor& labels,
                                             const Tensor* mask, const Tensor* input_pos) {
  return Run(tokens, labels, mask, input_pos, /*backward=*/false, 0.0);
}

}  // namespace cctune
