#include "modules/attention.h"

#include <optional>
#include <typeinfo>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "kernels/ops.h"

namespace cctune {

namespace {

// Scratch slots of one forward call.
enum Slot : size_t { kQ, kK, kV, kKExpanded, kVExpanded, kAttn, kNumSlots };
static_assert(kNumSlots == MultiHeadAttention::kScratchSlots);

absl::Status CheckProjection(const Linear* proj, const char* name, int64_t in, int64_t out,
                             const char* expected) {
  if (proj == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("MultiHeadAttention: ", name, " is required"));
  }
  if (proj->in_dim() != in || proj->out_dim() != out) {
    return absl::InvalidArgumentError(
        absl::StrCat("MultiHeadAttention: ", name, " maps ", proj->in_dim(), " -> ",
                     proj->out_dim(), ", expected ", in, " -> ", out, " (", expected, ")"));
  }
  return absl::OkStatus();
}

// [b, n_kv, s, h_d] -> [b, n_kv * groups, s, h_d] with head h = kv head h / groups, written
// into `dst` (torch's repeat_interleave on dim 1).
absl::Status ExpandHeads(Tensor& dst, const Tensor& src, int64_t groups) {
  const int64_t b = src.size(0), n_kv = src.size(1), s = src.size(2), h_d = src.size(3);
  CCTUNE_ASSIGN_OR_RETURN(Tensor s5, src.Unsqueeze(2));               // [b, n_kv, 1, s, h_d]
  CCTUNE_ASSIGN_OR_RETURN(s5, s5.Expand({b, n_kv, groups, s, h_d}));  // stride 0 on groups
  CCTUNE_ASSIGN_OR_RETURN(Tensor d5, dst.View({b, n_kv, groups, s, h_d}));
  return d5.CopyFrom(s5);
}

}  // namespace

const char* KvCacheLayoutName(KvCacheLayout layout) {
  return layout == KvCacheLayout::kGrouped ? "grouped" : "expanded";
}

absl::StatusOr<KvCacheLayout> ParseKvCacheLayout(absl::string_view name) {
  if (name == "grouped") return KvCacheLayout::kGrouped;
  if (name == "expanded") return KvCacheLayout::kExpanded;
  return absl::InvalidArgumentError(
      absl::StrCat("kv_cache_layout must be 'grouped' or "
                   "'expanded', got '",
                   name, "'"));
}

absl::StatusOr<std::unique_ptr<MultiHeadAttention>> MultiHeadAttention::Create(
    MultiHeadAttentionArgs args) {
  const int64_t d = args.embed_dim, n_h = args.num_heads, n_kv = args.num_kv_heads,
                h_d = args.head_dim;
  if (d <= 0 || n_h <= 0 || n_kv <= 0 || h_d <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("MultiHeadAttention: embed_dim (", d, "), num_heads (", n_h,
                     "), num_kv_heads (", n_kv, ") and head_dim (", h_d, ") must all be positive"));
  }
  if (n_h % n_kv != 0) {
    return absl::InvalidArgumentError(absl::StrCat("MultiHeadAttention: num_heads (", n_h,
                                                   ") must be divisible by num_kv_heads (", n_kv,
                                                   ")"));
  }
  if (d % n_h != 0) {
    return absl::InvalidArgumentError(absl::StrCat("MultiHeadAttention: embed_dim (", d,
                                                   ") must be divisible by num_heads (", n_h, ")"));
  }
  if (args.max_seq_len <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("MultiHeadAttention: max_seq_len (", args.max_seq_len, ") must be positive"));
  }
  CCTUNE_RETURN_IF_ERROR(CheckProjection(args.q_proj.get(), "q_proj", d, n_h * h_d,
                                         "embed_dim -> num_heads * head_dim"));
  CCTUNE_RETURN_IF_ERROR(CheckProjection(args.k_proj.get(), "k_proj", d, n_kv * h_d,
                                         "embed_dim -> num_kv_heads * head_dim"));
  CCTUNE_RETURN_IF_ERROR(CheckProjection(args.v_proj.get(), "v_proj", d, n_kv * h_d,
                                         "embed_dim -> num_kv_heads * head_dim"));
  CCTUNE_RETURN_IF_ERROR(CheckProjection(args.output_proj.get(), "output_proj", n_h * h_d, d,
                                         "num_heads * head_dim -> embed_dim"));
  if ((args.q_norm == nullptr) != (args.k_norm == nullptr)) {
    return absl::InvalidArgumentError("MultiHeadAttention: q and k norm must be set together");
  }
  if (args.q_norm != nullptr && (args.q_norm->dim() != h_d || args.k_norm->dim() != h_d)) {
    return absl::InvalidArgumentError(
        absl::StrCat("MultiHeadAttention: q_norm (", args.q_norm->dim(), ") and k_norm (",
                     args.k_norm->dim(), ") must normalise head_dim (", h_d, ")"));
  }
  if (args.pos_embeddings != nullptr && args.pos_embeddings->dim() != h_d) {
    return absl::InvalidArgumentError(absl::StrCat("MultiHeadAttention: pos_embeddings dim (",
                                                   args.pos_embeddings->dim(),
                                                   ") must equal head_dim (", h_d, ")"));
  }
  KvCacheLayout layout = KvCacheLayout::kGrouped;
  if (args.kv_cache != nullptr) {
    const int64_t heads = args.kv_cache->num_kv_heads();
    if (args.kv_cache->head_dim() != h_d || (heads != n_kv && heads != n_h)) {
      return absl::InvalidArgumentError(
          absl::StrCat("MultiHeadAttention: kv_cache holds ", heads, " heads of dim ",
                       args.kv_cache->head_dim(), ", expected num_kv_heads (", n_kv,
                       ") or num_heads (", n_h, ") heads of head_dim (", h_d, ")"));
    }
    if (heads != n_kv) layout = KvCacheLayout::kExpanded;
  }
  auto mha = std::unique_ptr<MultiHeadAttention>(new MultiHeadAttention(std::move(args)));
  mha->layout_ = layout;
  return mha;
}

MultiHeadAttention::MultiHeadAttention(MultiHeadAttentionArgs args)
    : embed_dim_(args.embed_dim),
      num_heads_(args.num_heads),
      num_kv_heads_(args.num_kv_heads),
      head_dim_(args.head_dim),
      max_seq_len_(args.max_seq_len),
      is_causal_(args.is_causal),
      q_proj_(std::move(args.q_proj)),
      k_proj_(std::move(args.k_proj)),
      v_proj_(std::move(args.v_proj)),
      output_proj_(std::move(args.output_proj)),
      pos_embeddings_(std::move(args.pos_embeddings)),
      q_norm_(std::move(args.q_norm)),
      k_norm_(std::move(args.k_norm)),
      kv_cache_(std::move(args.kv_cache)) {
  RegisterModule("q_proj", q_proj_.get());
  RegisterModule("k_proj", k_proj_.get());
  RegisterModule("v_proj", v_proj_.get());
  RegisterModule("output_proj", output_proj_.get());
  RegisterModule("q_norm", q_norm_.get());
  RegisterModule("k_norm", k_norm_.get());
}

absl::Status MultiHeadAttention::SetupCache(int64_t batch_size, DType dtype, int64_t max_seq_len,
                                            KvCacheLayout layout) {
  if (kv_cache_ != nullptr) {
    return absl::FailedPreconditionError(
        "MultiHeadAttention::SetupCache: a KV cache is already set up; call DeleteCache() "
        "first");
  }
  const Tensor& w = q_proj_->weight();
  if (!w.defined()) {
    return absl::FailedPreconditionError(
        "MultiHeadAttention::SetupCache: parameters are not materialised (create a "
        "ParameterArena first)");
  }
  const int64_t heads = layout == KvCacheLayout::kGrouped ? num_kv_heads_ : num_heads_;
  CCTUNE_ASSIGN_OR_RETURN(
      kv_cache_, KVCache::Create(batch_size, max_seq_len, heads, head_dim_, dtype, w.device()));
  layout_ = layout;
  return absl::OkStatus();
}

absl::Status MultiHeadAttention::ResetCache() {
  if (kv_cache_ == nullptr) {
    return absl::FailedPreconditionError(
        "MultiHeadAttention::ResetCache: no KV cache is set up; call SetupCache() first");
  }
  return kv_cache_->Reset();
}

std::optional<Tensor> MultiHeadAttention::FusedQkvWeight() const {
  const Tensor& wq = q_proj_->weight();
  const Tensor& wk = k_proj_->weight();
  const Tensor& wv = v_proj_->weight();
  // Only plain Linear projections can be fused (a LoRALinear adds its adapter in Forward).
  if (typeid(*q_proj_) != typeid(Linear) || typeid(*k_proj_) != typeid(Linear) ||
      typeid(*v_proj_) != typeid(Linear)) {
    return std::nullopt;
  }
  if (q_proj_->has_bias() || !wq.defined() || wq.device().is_meta() || !wq.SharesStorageWith(wk) ||
      !wq.SharesStorageWith(wv) || wk.dtype() != wq.dtype() || wv.dtype() != wq.dtype() ||
      !wq.is_contiguous() || !wk.is_contiguous() || !wv.is_contiguous() ||
      wk.offset() != wq.offset() + wq.numel() || wv.offset() != wk.offset() + wk.numel()) {
    return std::nullopt;
  }
  // The arena placed the three matrices back to back: view them as one [n_q + 2 n_kv, d].
  auto fused = Tensor::FromStorage(wq.storage(), {wq.size(0) + wk.size(0) + wv.size(0), embed_dim_},
                                   wq.dtype(), wq.offset());
  if (!fused.ok()) return std::nullopt;
  return *std::move(fused);
}

absl::Status MultiHeadAttention::Forward(Tensor& out, const Tensor& x, const Tensor* mask,
                                         const Tensor* input_pos, Activations* acts,
                                         ActivationStore* store) {
  if (x.dim() != 3 || x.size(2) != embed_dim_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MultiHeadAttention: x must be [b, s, ", embed_dim_, "], got ", ShapeToString(x.shape())));
  }
  if (acts != nullptr && kv_cache_ != nullptr) {
    return absl::FailedPreconditionError(
        "MultiHeadAttention: a training forward (with saved activations) does not use a KV "
        "cache; call DeleteCache() first");
  }
  if (acts != nullptr && q_norm_ != nullptr) {
    return absl::UnimplementedError(
        "MultiHeadAttention: q_norm/k_norm have no training backward yet");
  }
  const int64_t b = x.size(0), s = x.size(1);
  const int64_t n_h = num_heads_, n_kv = num_kv_heads_, h_d = head_dim_;
  const Device& dev = x.device();

  // With a cache, check the mask against the post-update length before anything is written.
  int64_t s_kv = s;
  if (kv_cache_ != nullptr) {
    CCTUNE_RETURN_IF_ERROR(kv_cache_->positions().Reserve(s).status());
    s_kv = kv_cache_->Size() + s;
  }
  Tensor mask_view;
  if (mask != nullptr) {
    const bool cache_wide =
        kv_cache_ != nullptr && mask->dim() == 3 && mask->size(2) == kv_cache_->max_seq_len();
    if (mask->dim() != 3 || mask->size(0) != b || mask->size(1) != s ||
        (mask->size(2) != s_kv && !cache_wide)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "MultiHeadAttention: mask must be [b, s, s_kv] = [", b, ", ", s, ", ", s_kv, "]",
          kv_cache_ != nullptr ? absl::StrCat(" (or [", b, ", ", s, ", ", kv_cache_->max_seq_len(),
                                              "] for the whole cache)")
                               : "",
          ", got ", ShapeToString(mask->shape())));
    }
    if (mask->dtype() != DType::kBool) {
      return absl::InvalidArgumentError(
          absl::StrCat("MultiHeadAttention: mask must be bool, got ", DTypeName(mask->dtype())));
    }
    if (mask->size(2) != s_kv) {
      CCTUNE_ASSIGN_OR_RETURN(mask_view, mask->Narrow(2, 0, s_kv));
    } else {
      mask_view = *mask;
    }
  }

  // Projections: q [b, s, n_h, h_d]; k, v [b, s, n_kv, h_d].
  Tensor q, k, v;
  const std::optional<Tensor> qkv_weight =
      acts == nullptr ? FusedQkvWeight() : std::optional<Tensor>();
  if (acts != nullptr) {
    CCTUNE_RETURN_IF_ERROR(EnsureF32(acts->q, {b, s, n_h * h_d}, dev));
    CCTUNE_RETURN_IF_ERROR(EnsureF32(acts->k, {b, s, n_kv * h_d}, dev));
    CCTUNE_RETURN_IF_ERROR(EnsureF32(acts->v, {b, s, n_kv * h_d}, dev));
    acts->x = x;
    q = acts->q;
    k = acts->k;
    v = acts->v;
    CCTUNE_RETURN_IF_ERROR(q_proj_->Forward(q, x, store, 0));
    CCTUNE_RETURN_IF_ERROR(k_proj_->Forward(k, x, store, 0));
    CCTUNE_RETURN_IF_ERROR(v_proj_->Forward(v, x, store, 0));
  } else if (qkv_weight.has_value()) {
    // One GEMM into [b, s, (n_h + 2 n_kv) h_d]; q, k and v are column views of it.
    const int64_t n = (n_h + 2 * n_kv) * h_d;
    CCTUNE_ASSIGN_OR_RETURN(Tensor qkv, scratch_.Get(kQ, {b, s, n}, DType::kF32, dev));
    CCTUNE_RETURN_IF_ERROR(ops::Linear(qkv, x, *qkv_weight));
    CCTUNE_ASSIGN_OR_RETURN(q, qkv.Narrow(2, 0, n_h * h_d));
    CCTUNE_ASSIGN_OR_RETURN(k, qkv.Narrow(2, n_h * h_d, n_kv * h_d));
    CCTUNE_ASSIGN_OR_RETURN(v, qkv.Narrow(2, (n_h + n_kv) * h_d, n_kv * h_d));
  } else {
    CCTUNE_ASSIGN_OR_RETURN(q, scratch_.Get(kQ, {b, s, n_h * h_d}, DType::kF32, dev));
    CCTUNE_ASSIGN_OR_RETURN(k, scratch_.Get(kK, {b, s, n_kv * h_d}, DType::kF32, dev));
    CCTUNE_ASSIGN_OR_RETURN(v, scratch_.Get(kV, {b, s, n_kv * h_d}, DType::kF32, dev));
    CCTUNE_RETURN_IF_ERROR(q_proj_->Forward(q, x, store, 0));
    CCTUNE_RETURN_IF_ERROR(k_proj_->Forward(k, x, store, 0));
    CCTUNE_RETURN_IF_ERROR(v_proj_->Forward(v, x, store, 0));
  }
  CCTUNE_ASSIGN_OR_RETURN(q, q.View({b, s, n_h, h_d}));
  CCTUNE_ASSIGN_OR_RETURN(k, k.View({b, s, n_kv, h_d}));
  CCTUNE_ASSIGN_OR_RETURN(v, v.View({b, s, n_kv, h_d}));

  if (pos_embeddings_ != nullptr) {
    CCTUNE_RETURN_IF_ERROR(pos_embeddings_->Forward(q, q, input_pos));
    CCTUNE_RETURN_IF_ERROR(pos_embeddings_->Forward(k, k, input_pos));
  }
  if (q_norm_ != nullptr) {
    CCTUNE_RETURN_IF_ERROR(q_norm_->Forward(q, q));
    CCTUNE_RETURN_IF_ERROR(k_norm_->Forward(k, k));
  }

  CCTUNE_ASSIGN_OR_RETURN(Tensor q_t, q.Transpose(1, 2));  // [b, n_h, s, h_d]
  CCTUNE_ASSIGN_OR_RETURN(Tensor k_t, k.Transpose(1, 2));  // [b, n_kv, s, h_d]
  CCTUNE_ASSIGN_OR_RETURN(Tensor v_t, v.Transpose(1, 2));  // [b, n_kv, s, h_d]
  if (acts == nullptr && layout_ == KvCacheLayout::kExpanded && n_h != n_kv) {
    // Legacy reference: materialise n_h heads before the cache.
    CCTUNE_ASSIGN_OR_RETURN(Tensor ke,
                            scratch_.Get(kKExpanded, {b, n_h, s, h_d}, DType::kF32, dev));
    CCTUNE_ASSIGN_OR_RETURN(Tensor ve,
                            scratch_.Get(kVExpanded, {b, n_h, s, h_d}, DType::kF32, dev));
    CCTUNE_RETURN_IF_ERROR(ExpandHeads(ke, k_t, n_h / n_kv));
    CCTUNE_RETURN_IF_ERROR(ExpandHeads(ve, v_t, n_h / n_kv));
    k_t = ke;  // [b, n_h, s, h_d]
    v_t = ve;
  }

  Tensor keys = k_t, values = v_t;  // [b, n_kv or n_h, s_kv, h_d]
  if (kv_cache_ != nullptr) {
    CCTUNE_RETURN_IF_ERROR(kv_cache_->Update(k_t, v_t));
    CCTUNE_ASSIGN_OR_RETURN(keys, kv_cache_->FilledKeys(b));
    CCTUNE_ASSIGN_OR_RETURN(values, kv_cache_->FilledValues(b));
  }

  // attn [b, s, n_h, h_d], written through its [b, n_h, s, h_d] transpose.
  Tensor attn;
  if (acts != nullptr) {
    CCTUNE_RETURN_IF_ERROR(EnsureF32(acts->attn, {b, s, n_h * h_d}, dev));
    CCTUNE_RETURN_IF_ERROR(EnsureF32(acts->lse, {b, n_h, s}, dev));
    CCTUNE_ASSIGN_OR_RETURN(attn, acts->attn.View({b, s, n_h, h_d}));
  } else {
    CCTUNE_ASSIGN_OR_RETURN(attn, scratch_.Get(kAttn, {b, s, n_h, h_d}, DType::kF32, dev));
  }
  CCTUNE_ASSIGN_OR_RETURN(Tensor attn_t, attn.Transpose(1, 2));
  ops::AttentionOptions options;
  options.mask = mask != nullptr ? &mask_view : nullptr;
  options.causal = mask == nullptr && is_causal_;
  if (acts != nullptr) {
    // The same kernel as ops::Attention, also keeping each row's log-sum-exp.
    CCTUNE_RETURN_IF_ERROR(ops::AttentionWithLse(attn_t, acts->lse, q_t, keys, values, options));
  } else {
    CCTUNE_RETURN_IF_ERROR(ops::Attention(attn_t, q_t, keys, values, options));
  }
  CCTUNE_ASSIGN_OR_RETURN(attn, attn.View({b, s, n_h * h_d}));
  return output_proj_->Forward(out, attn, store, 0);  // [b, s, d]
}

absl::Status MultiHeadAttention::Backward(Tensor& dx, const Tensor& dy, const Tensor* mask,
                                          const Tensor* input_pos, const Activations& a,
                                          ActivationStore& store) const {
  if (q_norm_ != nullptr) {
    return absl::UnimplementedError(
        "MultiHeadAttention: q_norm/k_norm have no training backward yet");
  }
  const int64_t b = a.q.size(0), s = a.q.size(1);
  const int64_t n_h = num_heads_, n_kv = num_kv_heads_, h_d = head_dim_;
  const Device& dev = dy.device();
  // [b, n, s, h_d] view of a [b, s, n·h_d] tensor.
  auto heads_t = [&](const Tensor& t, int64_t n) -> absl::StatusOr<Tensor> {
    CCTUNE_ASSIGN_OR_RETURN(Tensor v4, t.View({b, s, n, h_d}));
    return v4.Transpose(1, 2);
  };
  CCTUNE_ASSIGN_OR_RETURN(Tensor dattn,
                          store.ZeroTemp(StoreSlot::kAttnDattn, {b, s, n_h * h_d}, dev));
  CCTUNE_RETURN_IF_ERROR(output_proj_->Backward(&dattn, dy, a.attn, store, 0));
  CCTUNE_ASSIGN_OR_RETURN(Tensor dq, store.ZeroTemp(StoreSlot::kAttnDq, {b, s, n_h * h_d}, dev));
  CCTUNE_ASSIGN_OR_RETURN(Tensor dk, store.ZeroTemp(StoreSlot::kAttnDk, {b, s, n_kv * h_d}, dev));
  CCTUNE_ASSIGN_OR_RETURN(Tensor dv, store.ZeroTemp(StoreSlot::kAttnDv, {b, s, n_kv * h_d}, dev));
  {
    CCTUNE_ASSIGN_OR_RETURN(Tensor dq_t, heads_t(dq, n_h));
    CCTUNE_ASSIGN_OR_RETURN(Tensor dk_t, heads_t(dk, n_kv));
    CCTUNE_ASSIGN_OR_RETURN(Tensor dv_t, heads_t(dv, n_kv));
    CCTUNE_ASSIGN_OR_RETURN(Tensor dy_t, heads_t(dattn, n_h));
    CCTUNE_ASSIGN_OR_RETURN(Tensor q_t, heads_t(a.q, n_h));
    CCTUNE_ASSIGN_OR_RETURN(Tensor k_t, heads_t(a.k, n_kv));
    CCTUNE_ASSIGN_OR_RETURN(Tensor v_t, heads_t(a.v, n_kv));
    CCTUNE_ASSIGN_OR_RETURN(Tensor out_t, heads_t(a.attn, n_h));
    ops::AttentionOptions options;
    options.mask = mask;
    options.causal = mask == nullptr && is_causal_;
    CCTUNE_RETURN_IF_ERROR(
        ops::AttentionBackward(dq_t, dk_t, dv_t, dy_t, q_t, k_t, v_t, &out_t, &a.lse, options));
  }
  if (pos_embeddings_ != nullptr) {
    CCTUNE_ASSIGN_OR_RETURN(Tensor dq4, dq.View({b, s, n_h, h_d}));
    CCTUNE_ASSIGN_OR_RETURN(Tensor dk4, dk.View({b, s, n_kv, h_d}));
    CCTUNE_RETURN_IF_ERROR(pos_embeddings_->Backward(dq4, dq4, input_pos));
    CCTUNE_RETURN_IF_ERROR(pos_embeddings_->Backward(dk4, dk4, input_pos));
  }
  CCTUNE_RETURN_IF_ERROR(q_proj_->Backward(&dx, dq, a.x, store, 0));
  CCTUNE_RETURN_IF_ERROR(k_proj_->Backward(&dx, dk, a.x, store, 0));
  return v_proj_->Backward(&dx, dv, a.x, store, 0);
}

absl::StatusOr<Tensor> MultiHeadAttention::operator()(const Tensor& x, const Tensor* mask,
                                                      const Tensor* input_pos) {
  CCTUNE_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(x.shape(), DType::kF32, x.device()));
  CCTUNE_RETURN_IF_ERROR(Forward(out, x, mask, input_pos));
  return out;
}

}  // namespace cctune
