// The op API: one function per op, dispatching on the device of its tensors.
//
// Conventions (llm.c style): outputs come first and are allocated by the caller, with the
// exact shape and dtype documented per op; inputs may be non-contiguous views unless a comment
// says otherwise. Every function validates shapes, dtypes and devices here, once, and returns
// InvalidArgument naming the op, the argument and the values; backends (kernels/cpu,
// kernels/cuda) then run on validated inputs. All tensors of one call must be on one device.
// Floating math accumulates in f32 whatever the storage dtype (f32, bf16, f16).
//
// Backward ops (training) follow the same pattern, `FooBackward(dx, ..., dy, saved inputs)`;
// see "Backward" below for their gradient conventions.
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
// sum = a + b, then norm = RmsNorm(sum, weight, eps) from sum as stored: the residual add and
// the next norm of a decoder layer in one pass (CPU fused; other backends run the two ops).
// a, b, sum and norm share one shape [..., d]; sum may be a or b itself, norm neither.
absl::Status AddRmsNorm(Tensor& sum, Tensor& norm, const Tensor& a, const Tensor& b,
                        const Tensor& weight, float eps);

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

// Attention that also saves, for AttentionBackward, the log-sum-exp of each query row's
// scaled scores: lse[b, h, i] = log(sum_j exp(scale · q_i·k_j)) over the allowed keys j
// (natural log; -inf for a row whose mask allows nothing). lse: f32 [b, n_h, s_q]; the rest
// as in Attention.
absl::Status AttentionWithLse(Tensor& out, Tensor& lse, const Tensor& q, const Tensor& k,
                              const Tensor& v, const AttentionOptions& options = {});

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

// ---- Dropout (counter-based, so the mask is a pure function of (seed, offset, shape)) ----

// out = x · keep / (1 - p) (torch.nn.Dropout in training). Element i of x, numbered by its
// row-major index over x's shape (whatever the strides), is dropped (out = 0) when the
// Philox4x32-10 word number offset + i of stream `seed` has (word >> 8) · 2^-24 < p, that is
// when Generator(seed) at offset offset + i would give Uniform() < p; survivors are x · s with
// s = f32(1 / (1 - p)), computed in f32. The mask is thus the same on every backend and for
// any thread count, and a caller that advances its Generator by x.numel() words gets fresh
// bits next time. The backward of this op is the op itself with the same (seed, offset)
// applied to dy. p in [0, 1) (p = 0 copies x); x, out: any float dtype, one shape; out may be
// x itself (the same view) but must not otherwise overlap it.
absl::Status Dropout(Tensor& out, const Tensor& x, float p, uint64_t seed, uint64_t offset);

// ---- Cross-entropy (fused logits -> loss; chunked over rows) ----

// The summed loss over rows whose target is not ignore_index:
//   loss_sum = sum_i (logsumexp(logits[i, :]) - logits[i, targets[i]]),  num_valid = #rows,
// so the mean loss is loss_sum / num_valid. Each row is reduced on its own in f32 (nothing of
// size [n, v] is allocated) and the rows are summed in order in fp64, so the result does not
// depend on the thread count. logits: any float dtype [n, v]; targets: i32/i64 [n], each in
// [0, v) or equal to ignore_index. Writes loss_sum (f32, 0-d), num_valid (i64, 0-d) and, when
// given, row_loss (f32 [n]: each row's loss, 0 for ignored rows).
absl::Status CrossEntropyForward(Tensor& loss_sum, Tensor& num_valid, Tensor* row_loss,
                                 const Tensor& logits, const Tensor& targets,
                                 int64_t ignore_index = kIgnoreIndex);

// Writes dlogits[i, :] = (softmax(logits[i, :]) - onehot(targets[i])) · scale, and zeros for
// ignored rows; scale is 1 / num_valid for a mean loss (times the loss's own gradient). The
// softmax is recomputed row by row straight into dlogits. dlogits: f32 [n, v]; it may be
// logits itself (f32 logits, same view) so one [n, v] buffer serves both, as in llm.c.
absl::Status CrossEntropyBackward(Tensor& dlogits, const Tensor& logits, const Tensor& targets,
                                  float scale, int64_t ignore_index = kIgnoreIndex);

// ---- Backward (training) ----
//
// Gradients (every d* tensor, inputs and outputs) are f32. The saved forward inputs (x, w,
// weight, gate, up, q, k, v, out, y) may be f32, bf16 or f16 as in the forward ops, and any
// tensor may be a strided view. A gradient output that is a null pointer is not computed
// (e.g. the weight of a frozen layer).
//
// Unless an op says it WRITES, every gradient output ACCUMULATES (+=), as in llm.c: parameter
// gradients live in a zeroed gradient arena (weights shared between layers, such as a tied
// embedding and output projection, collect both contributions), and one zeroed input gradient
// collects several contributions (the residual stream; the q/k/v projections that read one
// normalised input). Zero a gradient before its first contribution. Gradient outputs must not
// overlap the op's other tensors unless the op allows it ("may be dy itself"). On the CPU the
// reductions these ops do themselves (bias, norm-weight and embedding gradients, attention,
// cross-entropy) run in an order fixed by the shapes alone, so they give the same bits for any
// thread count; LinearBackward's GEMMs follow the GEMM library's blocking.

// Linear, out = x · wᵀ (+ bias), with x [..., k], w [n, k], dy [..., n]:
//   dx [..., k] += dy · w;  dw [n, k] += dyᵀ · x (over all rows);  dbias [n] += sum_rows dy.
// Each of dx, dw, dbias is optional. w may be bf16/f16 (converted to f32 tiles for dx).
absl::Status LinearBackward(Tensor* dx, Tensor* dw, Tensor* dbias, const Tensor& dy,
                            const Tensor& x, const Tensor& w);

// Embedding: dtable[ids[i], :] += dy[i, :] for every index i of ids. Repeated ids are summed
// in index order (grouped by id first, so no two threads write one row). dtable: f32 [v, d];
// dy: f32 [..., d] with ids [...]; ids i32/i64, each in [0, v).
absl::Status EmbeddingBackward(Tensor& dtable, const Tensor& dy, const Tensor& ids);

// RmsNorm, out = x̂ · weight with x̂ = x · rstd, rstd = 1/sqrt(mean(x²) + eps):
//   dx [..., d] += rstd · (dy∘w - x · rstd² · mean(dy∘w∘x));  dweight [d] += sum_rows dy∘x̂.
// dweight (optional) uses x̂ rounded to x's dtype as the forward does; dx treats that rounding
// as the identity.
absl::Status RmsNormBackward(Tensor& dx, Tensor* dweight, const Tensor& dy, const Tensor& x,
                             const Tensor& weight, float eps);

// Rope: WRITES dx = dy rotated by -θ (the transpose of Rope's rotation) at the same positions
// with the same pairing. dx, dy: f32 [b, s, n, h_d]; dx may be dy itself (in place); cos, sin
// and positions as in Rope.
absl::Status RopeBackward(Tensor& dx, const Tensor& dy, const Tensor& cos, const Tensor& sin,
                          const Tensor& positions, RopePairing pairing);

// SiluMul, out = silu(gate) · up, all [..., f]:
//   dgate += dy · up · σ(gate) · (1 + gate · (1 - σ(gate)));  dup += dy · silu(gate).
// dgate and dup may be views of one [..., 2f] buffer (a fused gate/up projection).
absl::Status SiluMulBackward(Tensor& dgate, Tensor& dup, const Tensor& dy, const Tensor& gate,
                             const Tensor& up);

// Softmax over the last dim, given its output y: WRITES dx = y · (dy - sum(dy · y)).
// dx, dy: f32, y's shape; dx may be dy itself.
absl::Status SoftmaxBackward(Tensor& dx, const Tensor& dy, const Tensor& y);

// Add, out = a + b with b broadcast to a's shape (= dy's shape):
//   da += dy;  db += dy summed over the dims b was broadcast along (db has b's shape).
absl::Status AddBackward(Tensor* da, Tensor* db, const Tensor& dy);

// Mul, out = a · b with b broadcast to a's shape: da += dy · b;  db += sum_broadcast(dy · a).
absl::Status MulBackward(Tensor* da, Tensor* db, const Tensor& dy, const Tensor& a,
                         const Tensor& b);

// Attention (same q, k, v and options as the forward call), with dy [b, n_h, s_q, h_d]:
//   dq [b, n_h, s_q, h_d] += ∂/∂q;  dk, dv [b, n_kv, s_kv, h_d] += ∂/∂k, ∂/∂v, each summed
// over the n_h / n_kv query heads that share the kv head. The softmax is recomputed from q and
// k. Two optional saved tensors each save a pass: lse (from AttentionWithLse) gives the
// softmax statistics, and out (the forward's output) gives the rows' dy·out; an out stored in
// bf16/f16 carries its rounding into the gradients. Without them the op first recomputes
// what is missing. A query row whose mask allows
// nothing (zeros in the forward) contributes nothing.
absl::Status AttentionBackward(Tensor& dq, Tensor& dk, Tensor& dv, const Tensor& dy,
                               const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor* out, const Tensor* lse,
                               const AttentionOptions& options = {});

// ---- Optimizer updates (training) ----
//
// One update of a flat parameter buffer (llm.c style), element-wise so that the result does
// not depend on the thread count (or on how the buffer is split). Every tensor must be
// contiguous and is used flat: any shapes with equal element counts n. The f32 state (master,
// exp_avg, exp_avg_sq, momentum_buffer) and grad are updated / read in place. param is f32,
// or bf16 with an f32 `master` copy: the update then runs on master and writes master's
// bf16 rounding (round-to-nearest-even) into param; master must be null for f32 params.

// torch.optim.AdamW (see AdamWStep / AdamWScalars in op_types.h for the exact f32 formula).
// InvalidArgument for lr < 0, eps < 0, betas outside [0, 1), weight_decay < 0, step < 1.
absl::Status AdamWUpdate(Tensor& param, Tensor* master, Tensor& exp_avg, Tensor& exp_avg_sq,
                         const Tensor& grad, const AdamWStep& step);

// torch.optim.SGD (see SgdStep / SgdScalars in op_types.h). momentum_buffer (f32, n) is
// required when step.momentum != 0 and must be null otherwise; nesterov needs momentum > 0
// and dampening == 0, as in torch.
absl::Status SgdUpdate(Tensor& param, Tensor* master, Tensor* momentum_buffer,
                       const Tensor& grad, const SgdStep& step);

// *sum += sum(x²) in fp64, for the global gradient norm. x: contiguous f32, any shape. The
// summation order is fixed by x's size alone (CPU: fp64 partials over fixed chunks of 2^14
// elements, added to *sum in order; CUDA: per-chunk fp64 partials reduced by one block in a
// fixed tree), so each backend gives the same bits for any thread count. On CUDA the result
// is copied to the host (this waits for queued work).
absl::Status SquaredNorm(double* sum, const Tensor& x);

}  // namespace ops
}  // namespace cctune

#endif  // CCTUNE_KERNELS_OPS_H_
