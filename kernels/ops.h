// The op API: one function per op, dispatching on the device of its tensors.
//
// Conventions (llm.c style): outputs come first and are allocated by the caller, with the
// exact shape and dtype documented per op; inputs may be non-contiguous views unless a comment
// says otherwise. Every function validates shapes, dtypes and devices here, once, and returns
// InvalidArgument naming the op, the argument and the values; backends (kernels/cpu,
// kernels/cuda) then run on validated inputs. All tensors of one call must be on one device.
// Floating math accumulates in f32 whatever the storage dtype (f32, bf16, f16).
//
// Backward ops arrive with training; they follow the same pattern (`FooBackward(dx, ..., dy)`,
// gradients accumulate into caller-provided tensors).
#ifndef CCTUNE_KERNELS_OPS_H_
#define CCTUNE_KERNELS_OPS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/random.h"
#include "core/tensor.h"
#include "kernels/op_types.h"

namespace cctune {
namespace ops {

// ---- Linear algebra ----

// out[..., n] = x[..., k] · w[n, k]ᵀ (+ bias[n]).
// x: f32/bf16/f16 [..., k]; w: f32/bf16/f16 [n, k] (PyTorch nn.Linear layout);
// bias: optional, any float dtype [n]; out: f32/bf16/f16 [..., n]. f32 accumulation.
absl::Status Linear(Tensor& out, const Tensor& x, const Tensor& w, const Tensor* bias = nullptr);

// out[B..., m, n] = a[B..., m, k] @ b[B..., k, n]. Batch dims must be equal (use Expand to
// broadcast). Transposed views (e.g. b = k.Transpose(-1, -2)) are used without a copy.
absl::Status Matmul(Tensor& out, const Tensor& a, const Tensor& b);

// ---- Layers ----

// out[..., d] = table[ids[...], :]. ids: i32/i64, each in [0, v); table: [v, d].
absl::Status Embedding(Tensor& out, const Tensor& table, const Tensor& ids);

// out = x / sqrt(mean(x², last dim) + eps) * weight. x/out: [..., d]; weight: [d].
// The mean and scale are computed in f32; (x·rsqrt) is rounded to x's dtype before
// multiplying by weight only when x is not f32 (as torchtune's RMSNorm does via type_as).
absl::Status RmsNorm(Tensor& out, const Tensor& x, const Tensor& weight, float eps);

// theta_i = 1 / base^(2i / h_d) for i in [0, h_d/2), computed the way torchtune does (f32),
// then scaled when `scaling` is given. Returns a CPU f32 tensor [h_d/2].
absl::StatusOr<Tensor> RopeInvFrequencies(int64_t head_dim, double base,
                                          const RopeScaling* scaling = nullptr);

// cos/sin tables: cos[p, i] = cos(p · inv_freq[i]) for p in [0, max_seq_len). cos and sin are
// f32 [max_seq_len, h_d/2] on any device; inv_freq: f32 [h_d/2] on the same device.
absl::Status RopeCache(Tensor& cos, Tensor& sin, const Tensor& inv_freq);

// Rotates x by the angles at `positions`. x/out: [b, s, n, h_d] (any float dtype; out may be
// x itself); cos/sin: f32 [max_seq_len, h_d/2]; positions: i32/i64 [b, s] or [s], each in
// [0, max_seq_len).
absl::Status Rope(Tensor& out, const Tensor& x, const Tensor& cos, const Tensor& sin,
                  const Tensor& positions, RopePairing pairing);

// out = silu(gate) * up (SwiGLU's middle). All [..., f], same shape.
absl::Status SiluMul(Tensor& out, const Tensor& gate, const Tensor& up);

// Softmax over the last dim, in f32. out may be x itself.
absl::Status Softmax(Tensor& out, const Tensor& x);

// Scaled dot-product attention with grouped heads, with no copy of K/V:
// query head h reads KV head h / (n_h / n_kv).
// q: [b, n_h, s_q, h_d]; k, v: [b, n_kv, s_kv, h_d]; out: [b, n_h, s_q, h_d].
// n_h must be a multiple of n_kv. Strided views (e.g. [b, s, n, h_d] transposed) are fine.
// A query row whose mask allows nothing gets zeros.
absl::Status Attention(Tensor& out, const Tensor& q, const Tensor& k, const Tensor& v,
                       const AttentionOptions& options = {});

// ---- Elementwise ----

// out = a + b, out = a * b: b broadcasts to a's shape (trailing-aligned); out has a's shape.
absl::Status Add(Tensor& out, const Tensor& a, const Tensor& b);
absl::Status Mul(Tensor& out, const Tensor& a, const Tensor& b);
// out = alpha * x.
absl::Status Scale(Tensor& out, const Tensor& x, float alpha);
// out = x converted to out's dtype (any dtypes, same shape).
absl::Status Cast(Tensor& out, const Tensor& x);

// ---- Selection and sampling ----

// out[...] = index of the max over the last dim of x [..., v] (first one on ties); out: i64.
absl::Status Argmax(Tensor& out, const Tensor& x);

// The k largest over the last dim, sorted descending (ties: lower index first).
// values: x's dtype [..., k]; indices: i64 [..., k]; 1 <= k <= v.
absl::Status TopK(Tensor& values, Tensor& indices, const Tensor& x, int64_t k);

// Samples one token per row of logits [b, v]: divide by temperature, keep the top_k, keep the
// smallest set whose probability reaches top_p, renormalise, draw with `gen`. out: i64 [b].
// Consumes exactly one Uniform() per row (none when greedy), whatever the device.
absl::Status Sample(Tensor& out, const Tensor& logits, const SamplingParams& params,
                    Generator& gen);

}  // namespace ops
}  // namespace cctune

#endif  // CCTUNE_KERNELS_OPS_H_
