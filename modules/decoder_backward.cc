#include "modules/decoder_backward.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/dtype.h"
#include "core/status.h"
#include "kernels/ops.h"
#include "modules/attention.h"
#include "modules/feed_forward.h"
#include "modules/lora_linear.h"
#include "modules/rms_norm.h"
#include "modules/rotary_positional_embeddings.h"
#include "modules/tied_linear.h"
#include "modules/transformer_self_attention_layer.h"

namespace cctune {

// What one layer's backward reads (all f32, contiguous, on the model's device).
struct DecoderTrainer::LayerActs {
  Tensor xn1;   // [b, s, d] sa_norm(x)
  Tensor q;     // [b, s, n_h·h_d] after RoPE
  Tensor k;     // [b, s, n_kv·h_d] after RoPE
  Tensor v;     // [b, s, n_kv·h_d]
  Tensor attn;  // [b, s, n_h·h_d] attention output (before output_proj)
  Tensor lse;   // [b, n_h, s]
  Tensor h1;    // [b, s, d] x + attn block
  Tensor xn2;   // [b, s, d] mlp_norm(h1)
  Tensor gate;  // [b, s, f]
  Tensor up;    // [b, s, f]
  Tensor act;   // [b, s, f] silu(gate)·up
};

// Buffers that every call overwrites before reading, kept from one call to the next: a step
// allocates over a hundred MiB of activations, and fresh allocations that size are returned
// to the system on free and page-faulted back in (zeroed by the kernel) on every step.
struct DecoderTrainer::Workspace {
  std::vector<LayerActs> acts;  // grows to the most layers a call kept; never shrinks
  std::vector<Tensor> hs;
  Tensor xnf, logits_buf, scratch_out;
};

struct DecoderTrainer::Batch {
  int64_t b = 0, s = 0;
  Tensor tokens;     // [b, s]
  Tensor labels;     // [b·s]
  Tensor mask;       // bool [b, s, s]; undefined without one
  bool has_mask = false;
  Tensor positions;  // [b, s] or [s]
  Device device = Device::Cpu();

  ops::AttentionOptions Options(bool is_causal) const {
    ops::AttentionOptions o;
    o.mask = has_mask ? &mask : nullptr;
    o.causal = !has_mask && is_causal;
    return o;
  }
};

namespace {

absl::StatusOr<Tensor> F32(const Shape& shape, const Device& device) {
  return Tensor::Empty(shape, DType::kF32, device);
}
// Makes t an f32 tensor of `shape` on `device`, keeping its buffer when it already is one
// (its contents are then stale: only for buffers the caller overwrites).
absl::Status EnsureF32(Tensor& t, const Shape& shape, const Device& device) {
  if (t.defined() && t.dtype() == DType::kF32 && t.shape() == shape && t.device() == device &&
      t.is_contiguous()) {
    return absl::OkStatus();
  }
  CCTUNE_ASSIGN_OR_RETURN(t, Tensor::Empty(shape, DType::kF32, device));
  return absl::OkStatus();
}
absl::StatusOr<Tensor> F32Zeros(const Shape& shape, const Device& device) {
  return Tensor::Zeros(shape, DType::kF32, device);
}
// [b, s, n, h_d] view of a [b, s, n·h_d] tensor.
absl::StatusOr<Tensor> Heads(const Tensor& t, int64_t n, int64_t h_d) {
  return t.View({t.size(0), t.size(1), n, h_d});
}
// [b, n, s, h_d] view of a [b, s, n·h_d] tensor.
absl::StatusOr<Tensor> HeadsT(const Tensor& t, int64_t n, int64_t h_d) {
  CCTUNE_ASSIGN_OR_RETURN(Tensor v, Heads(t, n, h_d));
  return v.Transpose(1, 2);
}
bool IsIndex(DType t) { return t == DType::kI32 || t == DType::kI64; }

// result->loss_sum += the chunks' f32 losses, in order, in fp64 (one read from the device).
absl::Status AddChunkLosses(const Tensor& chunk_losses, LossSum* result) {
  CCTUNE_ASSIGN_OR_RETURN(std::vector<float> ls, chunk_losses.ToFloatVector());
  for (float l : ls) result->loss_sum += l;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<int64_t> CountValidLabels(const Tensor& labels) {
  if (!IsIndex(labels.dtype())) {
    return absl::InvalidArgumentError(
        absl::StrCat("CountValidLabels: labels must be i32/i64, got ", DTypeName(labels.dtype())));
  }
  CCTUNE_ASSIGN_OR_RETURN(std::vector<int64_t> values, labels.ToInt64Vector());
  return static_cast<int64_t>(
      std::count_if(values.begin(), values.end(), [](int64_t x) { return x != ops::kIgnoreIndex; }));
}

DecoderTrainer::DecoderTrainer(TransformerDecoder* model, DecoderTrainerOptions options)
    : model_(model), options_(options) {}

DecoderTrainer::~DecoderTrainer() = default;

absl::StatusOr<std::unique_ptr<DecoderTrainer>> DecoderTrainer::Create(
    TransformerDecoder* model, const ParameterArena* grads, DecoderTrainerOptions options) {
  if (model == nullptr || grads == nullptr) {
    return absl::InvalidArgumentError("DecoderTrainer: model and grads must not be null");
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
    absl::StatusOr<Tensor> g = grads->Get(name);
    if (!g.ok() && options.frozen_if_missing) continue;
    if (!g.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("DecoderTrainer: no gradient for parameter ", name, " in the grads arena"));
    }
    if (g->dtype() != DType::kF32 || g->shape() != param->value.shape()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "DecoderTrainer: gradient of ", name, " must be f32 ", ShapeToString(param->value.shape()),
          ", got ", DTypeName(g->dtype()), " ", ShapeToString(g->shape())));
    }
    t->grads_.emplace(&param->value, *std::move(g));
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
  if (const auto* tied = dynamic_cast<const TiedLinear*>(&out)) {
    t->output_weight_ = &tied->tied_module().weight();
  } else if (const auto* lin = dynamic_cast<const Linear*>(&out)) {
    CCTUNE_RETURN_IF_ERROR(note_dropout(*lin, "output"));
    t->output_weight_ = &lin->weight();
    t->output_bias_ = lin->bias();
    const auto* lora = dynamic_cast<const LoRALinear*>(lin);
    if (lora != nullptr && !lora->merged()) t->output_lora_ = lora;
  } else {
    return absl::UnimplementedError(
        "DecoderTrainer: the output projection must be a Linear or a TiedLinear");
  }
  return t;
}

Tensor DecoderTrainer::Grad(const Tensor& param) const {
  auto it = grads_.find(&param);
  return it == grads_.end() ? Tensor() : it->second;  // undefined: frozen
}

namespace {
Tensor* OrNull(Tensor& t) { return t.defined() ? &t : nullptr; }
}  // namespace

absl::Status DecoderTrainer::LinearBackward(Tensor* dx, const Linear& linear, const Tensor& dy,
                                            const Tensor& x) const {
  Tensor dw = Grad(linear.weight());
  Tensor db = linear.has_bias() ? Grad(*linear.bias()) : Tensor();
  if (dx != nullptr || dw.defined() || db.defined()) {
    CCTUNE_RETURN_IF_ERROR(ops::LinearBackward(dx, OrNull(dw), OrNull(db), dy, x, linear.weight()));
  }
  const auto* lora = dynamic_cast<const LoRALinear*>(&linear);
  if (lora == nullptr || lora->merged()) return absl::OkStatus();
  return AdapterBackward(dx, *lora, dy, x);
}

absl::Status DecoderTrainer::AdapterBackward(Tensor* dx, const LoRALinear& lora, const Tensor& dy,
                                             const Tensor& x, int64_t row0) const {
  // y += s · B (A x): with us = s · A x,  dB += dyᵀ us;  du = s · dy B;  dA += duᵀ x;
  // dx += du A. Every temporary is [rows, rank].
  //
  // With dropout the adapter reads xd = D x (D: the mask times 1/(1-p), diagonal), so
  // dA += duᵀ xd and dx += D (du A). The mask is regenerated here from the step's (seed,
  // offset) rather than saved by the forward: saving would keep one [b·s, in] tensor per
  // adapter alive from the forward to the backward (seven per layer, 6·d + f floats per token
  // per layer, more than all the activations kept now, and it would defeat activation
  // checkpointing), while regenerating costs one elementwise Philox pass per adapter, small
  // next to its GEMMs; xd lives only inside this call.
  const Tensor& a = lora.lora_a().weight();
  const Tensor& b = lora.lora_b().weight();
  Tensor da = Grad(a), dbw = Grad(b);
  if (dx == nullptr && !da.defined() && !dbw.defined()) return absl::OkStatus();
  const uint64_t* drop = DropoutOffset(lora);
  const float p = static_cast<float>(lora.dropout());
  const uint64_t drop_offset =
      drop == nullptr ? 0 : *drop + static_cast<uint64_t>(row0 * lora.in_dim());
  Tensor xa = x;  // the adapter's input
  if (drop != nullptr) {
    CCTUNE_ASSIGN_OR_RETURN(xa, F32(x.shape(), x.device()));
    CCTUNE_RETURN_IF_ERROR(ops::Dropout(xa, x, p, dropout_seed_, drop_offset));
  }
  Shape u_shape = x.shape();
  u_shape.back() = lora.rank();
  CCTUNE_ASSIGN_OR_RETURN(Tensor us, F32(u_shape, x.device()));
  CCTUNE_RETURN_IF_ERROR(ops::Linear(us, xa, a));
  const float scale = static_cast<float>(lora.scale());
  CCTUNE_RETURN_IF_ERROR(ops::Scale(us, us, scale));
  CCTUNE_ASSIGN_OR_RETURN(Tensor du, F32Zeros(u_shape, x.device()));
  CCTUNE_RETURN_IF_ERROR(ops::LinearBackward(&du, OrNull(dbw), nullptr, dy, us, b));
  if (dx == nullptr && !da.defined()) return absl::OkStatus();
  CCTUNE_RETURN_IF_ERROR(ops::Scale(du, du, scale));
  if (drop == nullptr) return ops::LinearBackward(dx, OrNull(da), nullptr, du, x, a);
  if (dx == nullptr) return ops::LinearBackward(nullptr, OrNull(da), nullptr, du, xa, a);
  // dx += D (du A), through a zeroed temporary that the mask is applied to in place.
  CCTUNE_ASSIGN_OR_RETURN(Tensor dxa, F32Zeros(x.shape(), x.device()));
  CCTUNE_RETURN_IF_ERROR(ops::LinearBackward(&dxa, OrNull(da), nullptr, du, xa, a));
  CCTUNE_RETURN_IF_ERROR(ops::Dropout(dxa, dxa, p, dropout_seed_, drop_offset));
  return ops::Add(*dx, *dx, dxa);
}

const uint64_t* DecoderTrainer::DropoutOffset(const Linear& linear) const {
  if (dropout_offsets_.empty()) return nullptr;
  const auto* lora = dynamic_cast<const LoRALinear*>(&linear);
  if (lora == nullptr) return nullptr;
  auto it = dropout_offsets_.find(lora);
  return it == dropout_offsets_.end() ? nullptr : &it->second;
}

absl::Status DecoderTrainer::ProjForward(const Linear& linear, Tensor& out, const Tensor& x,
                                         int64_t row0) const {
  const uint64_t* drop = DropoutOffset(linear);
  if (drop == nullptr) return linear.Forward(out, x);
  const auto& lora = static_cast<const LoRALinear&>(linear);
  return lora.ForwardWithDropout(out, x, dropout_seed_,
                                 *drop + static_cast<uint64_t>(row0 * lora.in_dim()));
}

void DecoderTrainer::AssignDropoutOffsets(int64_t rows) {
  dropout_offsets_.clear();
  Generator& gen = *generator_;
  dropout_seed_ = gen.seed();
  uint64_t next = gen.offset();
  bool any = false;
  for (const LoRALinear* lora : dropout_adapters_) {
    if (lora->merged()) continue;  // merged after Create: the adapter is no longer applied
    dropout_offsets_[lora] = next;
    next += static_cast<uint64_t>(rows) * static_cast<uint64_t>(lora->in_dim());
    any = true;
  }
  if (any) gen.SetState(dropout_seed_, next);
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
  } else {
    std::vector<int64_t> pos(bt.s);
    for (int64_t i = 0; i < bt.s; ++i) pos[i] = i;
    CCTUNE_ASSIGN_OR_RETURN(bt.positions, Tensor::FromVector(pos, {bt.s}));
    if (!bt.device.is_cpu()) {
      CCTUNE_ASSIGN_OR_RETURN(bt.positions, bt.positions.To(bt.device));
    }
  }
  return bt;
}

absl::Status DecoderTrainer::LayerForward(size_t l, LayerActs& a, const Tensor& x, Tensor& out,
                                          const Batch& bt) {
  const TransformerSelfAttentionLayer& layer = model_->layer(l);
  const MultiHeadAttention& attn = layer.attn();
  const FeedForward& mlp = layer.mlp();
  const int64_t b = bt.b, s = bt.s, d = model_->embed_dim();
  const int64_t n_h = attn.num_heads(), n_kv = attn.num_kv_heads(), h_d = attn.head_dim();
  const int64_t f = mlp.hidden_dim();
  const Device& dev = bt.device;
  auto ensure = [&](Tensor& t, const Shape& shape) { return EnsureF32(t, shape, dev); };
  CCTUNE_RETURN_IF_ERROR(ensure(a.xn1, {b, s, d}));
  CCTUNE_RETURN_IF_ERROR(ensure(a.q, {b, s, n_h * h_d}));
  CCTUNE_RETURN_IF_ERROR(ensure(a.k, {b, s, n_kv * h_d}));
  CCTUNE_RETURN_IF_ERROR(ensure(a.v, {b, s, n_kv * h_d}));
  CCTUNE_RETURN_IF_ERROR(ensure(a.attn, {b, s, n_h * h_d}));
  CCTUNE_RETURN_IF_ERROR(ensure(a.lse, {b, n_h, s}));
  CCTUNE_RETURN_IF_ERROR(ensure(a.h1, {b, s, d}));
  CCTUNE_RETURN_IF_ERROR(ensure(a.xn2, {b, s, d}));
  CCTUNE_RETURN_IF_ERROR(ensure(a.gate, {b, s, f}));
  CCTUNE_RETURN_IF_ERROR(ensure(a.up, {b, s, f}));
  CCTUNE_RETURN_IF_ERROR(ensure(a.act, {b, s, f}));

  // Attention block: h1 = x + output_proj(attention(rope(q), rope(k), v)).
  CCTUNE_RETURN_IF_ERROR(ops::RmsNorm(a.xn1, x, layer.sa_norm().scale(), layer.sa_norm().eps()));
  CCTUNE_RETURN_IF_ERROR(ProjForward(attn.q_proj(), a.q, a.xn1));
  CCTUNE_RETURN_IF_ERROR(ProjForward(attn.k_proj(), a.k, a.xn1));
  CCTUNE_RETURN_IF_ERROR(ProjForward(attn.v_proj(), a.v, a.xn1));
  CCTUNE_ASSIGN_OR_RETURN(Tensor q4, Heads(a.q, n_h, h_d));
  CCTUNE_ASSIGN_OR_RETURN(Tensor k4, Heads(a.k, n_kv, h_d));
  if (RotaryPositionalEmbeddings* rope = attn.pos_embeddings(); rope != nullptr) {
    CCTUNE_RETURN_IF_ERROR(rope->Setup(dev));
    CCTUNE_RETURN_IF_ERROR(
        ops::Rope(q4, q4, rope->cos(), rope->sin(), bt.positions, rope->pairing()));
    CCTUNE_RETURN_IF_ERROR(
        ops::Rope(k4, k4, rope->cos(), rope->sin(), bt.positions, rope->pairing()));
  }
  CCTUNE_ASSIGN_OR_RETURN(Tensor attn_t, HeadsT(a.attn, n_h, h_d));
  CCTUNE_ASSIGN_OR_RETURN(Tensor q_t, HeadsT(a.q, n_h, h_d));
  CCTUNE_ASSIGN_OR_RETURN(Tensor k_t, HeadsT(a.k, n_kv, h_d));
  CCTUNE_ASSIGN_OR_RETURN(Tensor v_t, HeadsT(a.v, n_kv, h_d));
  const ops::AttentionOptions opt = bt.Options(attn.is_causal());
  CCTUNE_RETURN_IF_ERROR(ops::AttentionWithLse(attn_t, a.lse, q_t, k_t, v_t, opt));
  // `out` doubles as the temporary for the projections' outputs.
  CCTUNE_RETURN_IF_ERROR(ProjForward(attn.output_proj(), out, a.attn));
  CCTUNE_RETURN_IF_ERROR(ops::Add(a.h1, x, out));

  // Feed-forward block: out = h1 + w2(silu(w1(xn2)) · w3(xn2)).
  CCTUNE_RETURN_IF_ERROR(
      ops::RmsNorm(a.xn2, a.h1, layer.mlp_norm().scale(), layer.mlp_norm().eps()));
  CCTUNE_RETURN_IF_ERROR(ProjForward(mlp.w1(), a.gate, a.xn2));
  CCTUNE_RETURN_IF_ERROR(ProjForward(mlp.w3(), a.up, a.xn2));
  CCTUNE_RETURN_IF_ERROR(ops::SiluMul(a.act, a.gate, a.up));
  CCTUNE_RETURN_IF_ERROR(ProjForward(mlp.w2(), out, a.act));
  return ops::Add(out, a.h1, out);
}

absl::Status DecoderTrainer::LayerBackward(size_t l, const LayerActs& a, const Tensor& x,
                                           Tensor& dh, const Batch& bt) {
  const TransformerSelfAttentionLayer& layer = model_->layer(l);
  const MultiHeadAttention& attn = layer.attn();
  const FeedForward& mlp = layer.mlp();
  const int64_t b = bt.b, s = bt.s, d = model_->embed_dim();
  const int64_t n_h = attn.num_heads(), n_kv = attn.num_kv_heads(), h_d = attn.head_dim();
  const int64_t f = mlp.hidden_dim();
  const Device& dev = bt.device;

  // Feed-forward block; dh holds d(out) and collects d(h1) (the residual passes it through).
  CCTUNE_ASSIGN_OR_RETURN(Tensor dact, F32Zeros({b, s, f}, dev));
  CCTUNE_RETURN_IF_ERROR(LinearBackward(&dact, mlp.w2(), dh, a.act));
  CCTUNE_ASSIGN_OR_RETURN(Tensor dgate, F32Zeros({b, s, f}, dev));
  CCTUNE_ASSIGN_OR_RETURN(Tensor dup, F32Zeros({b, s, f}, dev));
  CCTUNE_RETURN_IF_ERROR(ops::SiluMulBackward(dgate, dup, dact, a.gate, a.up));
  CCTUNE_ASSIGN_OR_RETURN(Tensor dxn, F32Zeros({b, s, d}, dev));
  CCTUNE_RETURN_IF_ERROR(LinearBackward(&dxn, mlp.w1(), dgate, a.xn2));
  CCTUNE_RETURN_IF_ERROR(LinearBackward(&dxn, mlp.w3(), dup, a.xn2));
  Tensor g_mlp_norm = Grad(layer.mlp_norm().scale());
  CCTUNE_RETURN_IF_ERROR(ops::RmsNormBackward(dh, OrNull(g_mlp_norm), dxn, a.h1, layer.mlp_norm().scale(),
                                              layer.mlp_norm().eps()));

  // Attention block; dh now holds d(h1) and collects d(x).
  CCTUNE_ASSIGN_OR_RETURN(Tensor dattn, F32Zeros({b, s, n_h * h_d}, dev));
  CCTUNE_RETURN_IF_ERROR(LinearBackward(&dattn, attn.output_proj(), dh, a.attn));
  CCTUNE_ASSIGN_OR_RETURN(Tensor dq, F32Zeros({b, s, n_h * h_d}, dev));
  CCTUNE_ASSIGN_OR_RETURN(Tensor dk, F32Zeros({b, s, n_kv * h_d}, dev));
  CCTUNE_ASSIGN_OR_RETURN(Tensor dv, F32Zeros({b, s, n_kv * h_d}, dev));
  {
    CCTUNE_ASSIGN_OR_RETURN(Tensor dq_t, HeadsT(dq, n_h, h_d));
    CCTUNE_ASSIGN_OR_RETURN(Tensor dk_t, HeadsT(dk, n_kv, h_d));
    CCTUNE_ASSIGN_OR_RETURN(Tensor dv_t, HeadsT(dv, n_kv, h_d));
    CCTUNE_ASSIGN_OR_RETURN(Tensor dy_t, HeadsT(dattn, n_h, h_d));
    CCTUNE_ASSIGN_OR_RETURN(Tensor q_t, HeadsT(a.q, n_h, h_d));
    CCTUNE_ASSIGN_OR_RETURN(Tensor k_t, HeadsT(a.k, n_kv, h_d));
    CCTUNE_ASSIGN_OR_RETURN(Tensor v_t, HeadsT(a.v, n_kv, h_d));
    CCTUNE_ASSIGN_OR_RETURN(Tensor out_t, HeadsT(a.attn, n_h, h_d));
    const ops::AttentionOptions opt = bt.Options(attn.is_causal());
    CCTUNE_RETURN_IF_ERROR(
        ops::AttentionBackward(dq_t, dk_t, dv_t, dy_t, q_t, k_t, v_t, &out_t, &a.lse, opt));
  }
  if (RotaryPositionalEmbeddings* rope = attn.pos_embeddings(); rope != nullptr) {
    CCTUNE_ASSIGN_OR_RETURN(Tensor dq4, Heads(dq, n_h, h_d));
    CCTUNE_ASSIGN_OR_RETURN(Tensor dk4, Heads(dk, n_kv, h_d));
    CCTUNE_RETURN_IF_ERROR(
        ops::RopeBackward(dq4, dq4, rope->cos(), rope->sin(), bt.positions, rope->pairing()));
    CCTUNE_RETURN_IF_ERROR(
        ops::RopeBackward(dk4, dk4, rope->cos(), rope->sin(), bt.positions, rope->pairing()));
  }
  CCTUNE_ASSIGN_OR_RETURN(dxn, F32Zeros({b, s, d}, dev));
  CCTUNE_RETURN_IF_ERROR(LinearBackward(&dxn, attn.q_proj(), dq, a.xn1));
  CCTUNE_RETURN_IF_ERROR(LinearBackward(&dxn, attn.k_proj(), dk, a.xn1));
  CCTUNE_RETURN_IF_ERROR(LinearBackward(&dxn, attn.v_proj(), dv, a.xn1));
  Tensor g_sa_norm = Grad(layer.sa_norm().scale());
  return ops::RmsNormBackward(dh, OrNull(g_sa_norm), dxn, x, layer.sa_norm().scale(),
                              layer.sa_norm().eps());
}

absl::StatusOr<LossSum> DecoderTrainer::Run(const Tensor& tokens, const Tensor& labels,
                                            const Tensor* mask, const Tensor* input_pos,
                                            bool backward, double normalizer) {
  CCTUNE_ASSIGN_OR_RETURN(Batch bt, PrepareBatch(tokens, labels, mask, input_pos));
  const int64_t b = bt.b, s = bt.s, n = b * s, d = model_->embed_dim();
  const int64_t v = model_->vocab_size();
  const size_t num_layers = model_->num_layers();
  const Device& dev = bt.device;
  const bool keep_all = backward && !options_.activation_checkpointing;
  // This step's LoRA dropout masks (training only; the recompute of activation checkpointing
  // and the backward reuse them).
  dropout_offsets_.clear();
  if (backward) AssignDropoutOffsets(b * s);

  // hs[l] is the input of layer l; hs[num_layers] the last layer's output. These and the
  // activations reuse the last call's buffers (all are written before they are read).
  if (ws_ == nullptr) ws_ = std::make_unique<Workspace>();
  std::vector<Tensor>& hs = ws_->hs;
  hs.resize(num_layers + 1);
  for (Tensor& h : hs) {
    CCTUNE_RETURN_IF_ERROR(EnsureF32(h, {b, s, d}, dev));
  }
  CCTUNE_RETURN_IF_ERROR(ops::Embedding(hs[0], model_->tok_embeddings().weight(), bt.tokens));
  std::vector<LayerActs>& acts = ws_->acts;
  if (acts.size() < (keep_all ? num_layers : 1)) acts.resize(keep_all ? num_layers : 1);
  for (size_t l = 0; l < num_layers; ++l) {
    CCTUNE_RETURN_IF_ERROR(LayerForward(l, acts[keep_all ? l : 0], hs[l], hs[l + 1], bt));
  }
  const RMSNorm& norm = model_->norm();
  Tensor& xnf = ws_->xnf;
  CCTUNE_RETURN_IF_ERROR(EnsureF32(xnf, {n, d}, dev));
  CCTUNE_ASSIGN_OR_RETURN(Tensor h_last, hs[num_layers].View({n, d}));
  CCTUNE_RETURN_IF_ERROR(ops::RmsNorm(xnf, h_last, norm.scale(), norm.eps()));

  // The loss's normaliser must be known before the fused backward of the output chunks.
  // Counted on the caller's labels: free when they are on the host (the recipes' case), one
  // copy when they were passed on the device.
  LossSum result;
  CCTUNE_ASSIGN_OR_RETURN(result.num_valid, CountValidLabels(labels));
  if (normalizer <= 0) normalizer = static_cast<double>(result.num_valid);
  const bool do_backward = backward && result.num_valid > 0;

  // Fused output projection + cross-entropy (+ its backward), by row chunks.
  int64_t chunk = options_.logits_chunk_rows;
  if (chunk <= 0) chunk = std::max<int64_t>(1, (int64_t{1} << 24) / std::max<int64_t>(v, 1));
  chunk = std::min(chunk, n);
  Tensor& logits_buf = ws_->logits_buf;
  CCTUNE_RETURN_IF_ERROR(EnsureF32(logits_buf, {chunk, v}, dev));
  Tensor dxnf, g_out_w, g_out_b;
  if (do_backward) {
    CCTUNE_ASSIGN_OR_RETURN(dxnf, F32Zeros({n, d}, dev));
    g_out_w = Grad(*output_weight_);
    if (output_bias_ != nullptr) g_out_b = Grad(*output_bias_);
  }
  // Each chunk's loss goes to its own slot on the model's device; they are read back once,
  // after the whole backward is queued (one host sync per call), and summed in chunk order in
  // fp64 as the chunks come.
  const int64_t num_chunks = n > 0 ? (n + chunk - 1) / chunk : 0;
  CCTUNE_ASSIGN_OR_RETURN(Tensor chunk_losses, F32({num_chunks}, dev));
  CCTUNE_ASSIGN_OR_RETURN(Tensor num_valid, Tensor::Empty({}, DType::kI64, dev));
  for (int64_t r0 = 0; r0 < n; r0 += chunk) {
    const int64_t rows = std::min(chunk, n - r0);
    CCTUNE_ASSIGN_OR_RETURN(Tensor logits, logits_buf.Narrow(0, 0, rows));
    CCTUNE_ASSIGN_OR_RETURN(Tensor x_rows, xnf.Narrow(0, r0, rows));
    CCTUNE_ASSIGN_OR_RETURN(Tensor targets, bt.labels.Narrow(0, r0, rows));
    if (output_lora_ != nullptr) {
      CCTUNE_RETURN_IF_ERROR(ProjForward(*output_lora_, logits, x_rows, r0));
    } else {
      CCTUNE_RETURN_IF_ERROR(ops::Linear(logits, x_rows, *output_weight_, output_bias_));
    }
    CCTUNE_ASSIGN_OR_RETURN(Tensor loss_sum, chunk_losses.Select(0, r0 / chunk));
    CCTUNE_RETURN_IF_ERROR(ops::CrossEntropyForward(loss_sum, num_valid, nullptr, logits, targets));
    if (do_backward) {
      CCTUNE_RETURN_IF_ERROR(ops::CrossEntropyBackward(logits, logits, targets,
                                                       static_cast<float>(1.0 / normalizer)));
      CCTUNE_ASSIGN_OR_RETURN(Tensor dx_rows, dxnf.Narrow(0, r0, rows));
      CCTUNE_RETURN_IF_ERROR(ops::LinearBackward(&dx_rows, OrNull(g_out_w), OrNull(g_out_b),
                                                 logits, x_rows, *output_weight_));
      if (output_lora_ != nullptr) {
        CCTUNE_RETURN_IF_ERROR(AdapterBackward(&dx_rows, *output_lora_, logits, x_rows, r0));
      }
    }
  }
  if (!do_backward) {
    CCTUNE_RETURN_IF_ERROR(AddChunkLosses(chunk_losses, &result));
    return result;
  }

  // Backward. dh is the residual stream's gradient, from the last layer's output down.
  CCTUNE_ASSIGN_OR_RETURN(Tensor dh, F32Zeros({b, s, d}, dev));
  {
    CCTUNE_ASSIGN_OR_RETURN(Tensor dh_rows, dh.View({n, d}));
    Tensor g_norm = Grad(norm.scale());
    CCTUNE_RETURN_IF_ERROR(
        ops::RmsNormBackward(dh_rows, OrNull(g_norm), dxnf, h_last, norm.scale(), norm.eps()));
  }
  Tensor& scratch_out = ws_->scratch_out;
  CCTUNE_RETURN_IF_ERROR(EnsureF32(scratch_out, {b, s, d}, dev));
  for (size_t l = num_layers; l-- > 0;) {
    LayerActs* a = &acts[0];
    if (keep_all) {
      a = &acts[l];
    } else if (l + 1 < num_layers) {
      // Recompute this layer's activations from its saved input (the last layer's are still
      // in acts[0] from the forward).
      CCTUNE_RETURN_IF_ERROR(LayerForward(l, *a, hs[l], scratch_out, bt));
    }
    CCTUNE_RETURN_IF_ERROR(LayerBackward(l, *a, hs[l], dh, bt));
  }
  Tensor g_emb = Grad(model_->tok_embeddings().weight());
  if (g_emb.defined()) {
    CCTUNE_RETURN_IF_ERROR(ops::EmbeddingBackward(g_emb, dh, bt.tokens));
  }
  CCTUNE_RETURN_IF_ERROR(AddChunkLosses(chunk_losses, &result));
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
