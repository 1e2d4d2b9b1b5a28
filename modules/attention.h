// MultiHeadAttention with grouped-query attention (GQA), as torchtune builds it:
//
//   q = q_proj(x)  -> [b, s, n_h, h_d]        k, v = k_proj(x), v_proj(x) -> [b, s, n_kv, h_d]
//   RoPE on q and k; optional q_norm / k_norm (after RoPE, as torchtune 0.6 orders them)
//   cache (if any) updated with the n_kv heads
//   attention: query head h reads KV head h / (n_h / n_kv), with no copy of K/V
//   out = output_proj(attention) -> [b, s, d]
//
// One Forward serves every mode, through the same grouped-query ops::Attention kernel:
// training (no cache; an Activations struct and a store saved for Backward) and evaluation
// attend over the current k/v with a causal or an explicit mask; generation (cache) attends
// over the cache's filled positions only, not all of max_seq_len.
//
// KvCacheLayout::kExpanded keeps the pre-#1961 torchtune behaviour as a reference: k/v are
// expanded to n_h heads (repeat_interleave: head h gets KV head h / (n_h / n_kv)) BEFORE the
// cache update, so the cache is n_h / n_kv times larger. Both layouts give the same outputs.
#ifndef CCTUNE_MODULES_ATTENTION_H_
#define CCTUNE_MODULES_ATTENTION_H_

#include <cstdint>
#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "modules/activation_store.h"
#include "modules/kv_cache.h"
#include "modules/linear.h"
#include "modules/module.h"
#include "modules/rms_norm.h"
#include "modules/rotary_positional_embeddings.h"
#include "modules/scratch.h"

namespace cctune {

enum class KvCacheLayout {
  kGrouped,   // cache holds n_kv heads (default)
  kExpanded,  // legacy: cache holds n_h heads, k/v expanded before the update
};
const char* KvCacheLayoutName(KvCacheLayout layout);  // "grouped", "expanded"
absl::StatusOr<KvCacheLayout> ParseKvCacheLayout(absl::string_view name);

// The constructor arguments, named as torchtune names them.
struct MultiHeadAttentionArgs {
  int64_t embed_dim = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  std::unique_ptr<Linear> q_proj;                              // d -> n_h * h_d
  std::unique_ptr<Linear> k_proj;                              // d -> n_kv * h_d
  std::unique_ptr<Linear> v_proj;                              // d -> n_kv * h_d
  std::unique_ptr<Linear> output_proj;                         // n_h * h_d -> d
  std::shared_ptr<RotaryPositionalEmbeddings> pos_embeddings;  // optional, usually shared
  std::unique_ptr<RMSNorm> q_norm;  // optional, over h_d; set together with k_norm
  std::unique_ptr<RMSNorm> k_norm;
  std::unique_ptr<KVCache> kv_cache;  // optional; SetupCache() can add one later
  int64_t max_seq_len = 4096;
  bool is_causal = true;
};

class MultiHeadAttention : public Module {
 public:
  // Validates the arguments; errors name the values, e.g.
  // "num_heads (32) must be divisible by num_kv_heads (5)".
  static absl::StatusOr<std::unique_ptr<MultiHeadAttention>> Create(MultiHeadAttentionArgs args);

  int64_t embed_dim() const { return embed_dim_; }
  int64_t num_heads() const { return num_heads_; }
  int64_t num_kv_heads() const { return num_kv_heads_; }
  int64_t head_dim() const { return head_dim_; }
  int64_t max_seq_len() const { return max_seq_len_; }
  bool is_causal() const { return is_causal_; }
  const Linear& q_proj() const { return *q_proj_; }
  const Linear& k_proj() const { return *k_proj_; }
  const Linear& v_proj() const { return *v_proj_; }
  const Linear& output_proj() const { return *output_proj_; }
  // The RoPE module (nullptr when the attention has none) and the optional q/k norms.
  RotaryPositionalEmbeddings* pos_embeddings() const { return pos_embeddings_.get(); }
  const RMSNorm* q_norm() const { return q_norm_.get(); }
  const RMSNorm* k_norm() const { return k_norm_.get(); }

  // Creates a KV cache on the parameters' device: n_kv heads (kGrouped) or n_h heads
  // (kExpanded). FailedPrecondition if a cache exists already (DeleteCache() first) or the
  // parameters are not materialised.
  absl::Status SetupCache(int64_t batch_size, DType dtype, int64_t max_seq_len,
                          KvCacheLayout layout = KvCacheLayout::kGrouped);
  bool HasCache() const { return kv_cache_ != nullptr; }
  // FailedPrecondition when there is no cache.
  absl::Status ResetCache();
  void DeleteCache() { kv_cache_.reset(); }
  const KVCache* kv_cache() const { return kv_cache_.get(); }
  KvCacheLayout kv_cache_layout() const { return layout_; }
  // How training forwards (no cache) treat k/v; SetupCache sets it too.
  void set_kv_cache_layout(KvCacheLayout layout) { layout_ = layout; }

  // q_proj, k_proj and v_proj weights as one [(n_h + 2 n_kv) h_d, d] view when the arena laid
  // them out back to back (no biases, one dtype): Forward then computes q, k and v with one
  // GEMM. nullopt otherwise (three GEMMs).
  std::optional<Tensor> FusedQkvWeight() const;

  // What Backward reads, saved by a training Forward (f32, contiguous; the buffers are kept
  // from one call to the next).
  struct Activations {
    Tensor x;     // [b, s, d] the input (a view: the caller keeps it unchanged until Backward)
    Tensor q;     // [b, s, n_h·h_d] after RoPE
    Tensor k;     // [b, s, n_kv·h_d] after RoPE
    Tensor v;     // [b, s, n_kv·h_d]
    Tensor attn;  // [b, s, n_h·h_d] attention output (before output_proj)
    Tensor lse;   // [b, n_h, s] log-sum-exp of each query row's scores
  };

  // out [b, s, d] (f32/bf16) = attention(x [b, s, d]).
  // mask: optional bool [b, s, s_kv], true = may attend. Without a cache s_kv = s; with one,
  //   s_kv is either the filled length after this update or the cache's max_seq_len
  //   (torchtune's layout; only the filled columns are used). Without a mask, attention is
  //   causal when is_causal (query i sits at position s_kv - s + i) and full otherwise.
  // input_pos: optional i32/i64 [b, s] (or [s]) RoPE positions; default 0..s-1.
  // acts/store: a training forward (no cache allowed; FailedPrecondition with one, and
  // Unimplemented with q/k norms, whose backward is not written yet) saves into `acts`; q, k
  // and v then come from three projections into their own buffers (the backward runs each
  // projection's on its own), otherwise from one fused GEMM when the weights allow it.
  absl::Status Forward(Tensor& out, const Tensor& x, const Tensor* mask = nullptr,
                       const Tensor* input_pos = nullptr, Activations* acts = nullptr,
                       ActivationStore* store = nullptr);
  // dx [b, s, d] += d(attention)/dx · dy [b, s, d], and the projections' gradients, from the
  // saved `acts`; mask and input_pos are the forward's.
  absl::Status Backward(Tensor& dx, const Tensor& dy, const Tensor* mask, const Tensor* input_pos,
                        const Activations& acts, ActivationStore& store) const;
  // A new f32 output on x's device.
  absl::StatusOr<Tensor> operator()(const Tensor& x, const Tensor* mask = nullptr,
                                    const Tensor* input_pos = nullptr);

  // Inference buffers: slots [first_slot, first_slot + kScratchSlots) of `pool` from now on
  // (modules/scratch.h; TransformerSelfAttentionLayer::ShareScratch).
  static constexpr size_t kScratchSlots = 6;
  void ShareScratch(std::shared_ptr<Scratch> pool, size_t first_slot) {
    scratch_.Share(std::move(pool), first_slot);
  }

 private:
  explicit MultiHeadAttention(MultiHeadAttentionArgs args);

  int64_t embed_dim_;
  int64_t num_heads_;
  int64_t num_kv_heads_;
  int64_t head_dim_;
  int64_t max_seq_len_;
  bool is_causal_;
  KvCacheLayout layout_ = KvCacheLayout::kGrouped;
  std::unique_ptr<Linear> q_proj_;
  std::unique_ptr<Linear> k_proj_;
  std::unique_ptr<Linear> v_proj_;
  std::unique_ptr<Linear> output_proj_;
  std::shared_ptr<RotaryPositionalEmbeddings> pos_embeddings_;
  std::unique_ptr<RMSNorm> q_norm_;
  std::unique_ptr<RMSNorm> k_norm_;
  std::unique_ptr<KVCache> kv_cache_;
  Scratch scratch_;
};

}  // namespace cctune

#endif  // CCTUNE_MODULES_ATTENTION_H_
