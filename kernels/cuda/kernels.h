// Raw-pointer CUDA kernels of the cuda backend, behind plain host launch functions.
//
// This header is shared by the nvcc-compiled .cu files and the host-compiled wrappers
// (cuda_device.cc, cuda_backend.cc), so it holds only plain C++ and CUDA runtime types: no
// Abseil, no Tensor. Every launch function enqueues work on `stream` and returns the launch
// error (cudaGetLastError), never synchronising. Tensors cross as CuTensor (pointer at element
// [0,...,0], dtype code, shape and strides in elements). Callers validate shapes; launchers
// only guard memory safety.
#ifndef CCTUNE_KERNELS_CUDA_KERNELS_H_
#define CCTUNE_KERNELS_CUDA_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace cctune {
namespace cuda {

// Mirrors cctune::DType's values (static_assert'ed in cuda_backend.cc).
enum DtCode : int { kDtF32 = 0, kDtBF16 = 1, kDtF16 = 2, kDtI32 = 3, kDtI64 = 4, kDtBool = 5 };

constexpr int kCuMaxDims = 8;

struct CuTensor {
  void* data = nullptr;
  int dtype = kDtF32;
  int ndim = 0;
  int64_t shape[kCuMaxDims] = {};
  int64_t strides[kCuMaxDims] = {};

  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= shape[i];
    return n;
  }
};

// ---- Copies (copy_kernels.cu) ----

// dst[i] = cast(src[i]); equal shapes; any dtype pair. Conversions are bit-identical to
// core's StridedCopyCpu (round-to-nearest-even for bf16/f16, truncation to integers), except
// float -> integer of NaN or out-of-range values, which saturate here (NaN -> 0) and are
// undefined on the CPU.
cudaError_t LaunchStridedCopy(const CuTensor& dst, const CuTensor& src, cudaStream_t stream);

// ---- Elementwise (elementwise_kernels.cu) ----

enum class BinaryOp : int { kAdd, kMul, kSiluMul };

// out = a (op) b over equal shapes (broadcast b with stride-0 dims beforehand). Floating
// outputs compute in f32; integer outputs in int64.
cudaError_t LaunchBinary(BinaryOp op, const CuTensor& out, const CuTensor& a, const CuTensor& b,
                         cudaStream_t stream);
// out = alpha * x.
cudaError_t LaunchScale(const CuTensor& out, const CuTensor& x, float alpha, cudaStream_t stream);

// ---- Decode GEMV (gemv_kernels.cu) ----

// out[i * ldo + j] = Σ_t x[i * ldx + t] · w[j * ldw + t] (+ bias[j]) for i < m ≤ kGemvMaxRows,
// j < n: the decode shape (a few rows of activations against a row-major weight); the backend's
// Linear takes it where it measured at least as fast as cuBLAS (GemvMaxRows in
// cuda_backend.cc: 80-82% of the device copy bandwidth at m = 1). x and w share `dtype` (f32, bf16 or f16),
// rows unit-stride; f32 accumulation; bias (any float dtype, contiguous, or null) is added
// before the one rounding into out's float dtype. cudaErrorInvalidValue for other arguments.
constexpr int64_t kGemvMaxRows = 8;
cudaError_t LaunchGemv(int64_t m, int64_t n, int64_t k, int dtype, const void* x, int64_t ldx,
                       const void* w, int64_t ldw, const void* bias, int bias_dtype, void* out,
                       int out_dtype, int64_t ldo, cudaStream_t stream);

// ---- Row-wise (norm_kernels.cu): rows are all dims but the last ----

// out = x * rsqrt(mean(x^2) + eps) * weight; the normalised value is rounded to x's dtype
// before the weight multiply when x is not f32.
cudaError_t LaunchRmsNorm(const CuTensor& out, const CuTensor& x, const CuTensor& weight, float eps,
                          cudaStream_t stream);
// Softmax over the last dim in f32; out may alias x exactly.
cudaError_t LaunchSoftmax(const CuTensor& out, const CuTensor& x, cudaStream_t stream);

// ---- RoPE (rope_kernels.cu) ----

// cos[p, i] = cos(f32(p * inv_freq[i])), same for sin. cos, sin: f32 2-D; inv_freq: f32 1-D.
cudaError_t LaunchRopeCache(const CuTensor& cos, const CuTensor& sin, const CuTensor& inv_freq,
                            cudaStream_t stream);
// x/out [b, s, n, h_d]; cos/sin f32 [max_seq, h_d/2]; positions [b, s] or [s] (i32/i64).
// An out-of-range position writes NaN. out may alias x exactly.
cudaError_t LaunchRope(const CuTensor& out, const CuTensor& x, const CuTensor& cos,
                       const CuTensor& sin, const CuTensor& positions, bool interleaved,
                       cudaStream_t stream);

// ---- Indexing and selection (index_kernels.cu) ----

// out[..., j] = table[ids[...], j]; ids i32/i64; an out-of-range id writes zeros.
cudaError_t LaunchEmbedding(const CuTensor& out, const CuTensor& table, const CuTensor& ids,
                            cudaStream_t stream);
// out[r] = first index of the max of row r of x [..., v]; out i64 with x's leading shape.
cudaError_t LaunchArgmax(const CuTensor& out, const CuTensor& x, cudaStream_t stream);
// Scratch bytes LaunchTopK needs for `rows` rows of length `v` (rows * v < 2^31).
cudaError_t TopKWorkspaceBytes(int64_t rows, int64_t v, size_t* bytes);
// The k largest of each row, sorted descending, ties by lower index (a stable radix sort).
// values: x's dtype [..., k]; indices: i64 [..., k].
cudaError_t LaunchTopK(const CuTensor& values, const CuTensor& indices, const CuTensor& x,
                       int64_t k, void* workspace, size_t workspace_bytes, cudaStream_t stream);

// ---- Attention (attention_kernels.cu) ----

struct AttentionArgs {
  CuTensor out;   // [b, n_h, s_q, h_d]
  CuTensor q;     // [b, n_h, s_q, h_d]
  CuTensor k;     // [b, n_kv, s_kv, h_d]
  CuTensor v;     // [b, n_kv, s_kv, h_d]
  CuTensor mask;  // bool [b, s_q, s_kv]; data == nullptr when absent
  bool causal = false;
  float scale = 1.f;  // already resolved (never 0)
  // Training: f32 [b, n_h, s_q] (any strides) that also gets each row's log-sum-exp of the
  // scaled scores, -inf for a row with no allowed key; data == nullptr when not wanted.
  CuTensor lse;
};

// How many key splits the decode-friendly split path uses (1: the direct kernel), and the
// f32 scratch it needs.
int AttentionNumSplits(const AttentionArgs& args, int num_sms);
size_t AttentionWorkspaceBytes(const AttentionArgs& args, int num_splits);
cudaError_t LaunchAttention(const AttentionArgs& args, int num_splits, void* workspace,
                            cudaStream_t stream);

// ---- Training: backward kernels (elementwise, row-wise, embedding, loss) ----
// (backward_kernels.cu and loss_kernels.cu.) Gradients are f32; saved forward inputs any float
// dtype. Every reduction runs in an order fixed by the shapes alone (no float atomics), so
// results are bit-reproducible run to run.

// out (f32) += in (f32), summed over the dims where `out` has stride 0 and size > 1: `out` is
// the gradient of a broadcast operand, Expand()ed to in's shape. Shapes equal.
cudaError_t LaunchSumReduce(const CuTensor& out, const CuTensor& in, cudaStream_t stream);
// out (f32) += x * y, or out += x when y.data == nullptr. Equal shapes (y may have stride-0
// broadcast dims); x and y any float dtype.
cudaError_t LaunchAccumulate(const CuTensor& out, const CuTensor& x, const CuTensor& y,
                             cudaStream_t stream);
// SiluMul backward: dgate += dy * up * s * (1 + gate * (1 - s)), dup += dy * gate * s with
// s = sigmoid(gate). All the same shape; dgate and dup must not overlap each other or the inputs.
cudaError_t LaunchSiluMulBackward(const CuTensor& dgate, const CuTensor& dup, const CuTensor& dy,
                                  const CuTensor& gate, const CuTensor& up, cudaStream_t stream);
// Softmax backward over the last dim: dx = y * (dy - sum(dy * y)); dx may alias dy exactly.
cudaError_t LaunchSoftmaxBackward(const CuTensor& dx, const CuTensor& dy, const CuTensor& y,
                                  cudaStream_t stream);
// f32 scratch (in floats) LaunchRmsNormBackward needs for x's shape, when dweight is wanted.
int64_t RmsNormBackwardScratchFloats(const CuTensor& x);
// RmsNorm backward (see ops.h): dx += ...; dweight (data == nullptr: skipped) += sum over rows
// of dy * x̂, through per-chunk partial sums in `scratch` (RmsNormBackwardScratchFloats floats).
cudaError_t LaunchRmsNormBackward(const CuTensor& dx, const CuTensor& dweight, const CuTensor& dy,
                                  const CuTensor& x, const CuTensor& weight, float eps,
                                  float* scratch, cudaStream_t stream);
// dx = dy rotated by -theta (Rope's transpose); shapes as LaunchRope; dx may alias dy exactly.
// An out-of-range position writes NaN.
cudaError_t LaunchRopeBackward(const CuTensor& dx, const CuTensor& dy, const CuTensor& cos,
                               const CuTensor& sin, const CuTensor& positions, bool interleaved,
                               cudaStream_t stream);
// dtable[rows[g], :] += sum of dy[order[i], :] for i in [starts[g], starts[g + 1]), in that
// order: `order` holds the flat indices of ids sorted by id (stable), `starts` the first
// position of each of the `groups` distinct ids, `rows` those ids (device int64 arrays of
// n, groups + 1 and groups entries). dy [..., d] with ids' leading shape; dtable f32 [v, d].
cudaError_t LaunchEmbeddingBackward(const CuTensor& dtable, const CuTensor& dy,
                                    const int64_t* order, const int64_t* starts,
                                    const int64_t* rows, int64_t groups, cudaStream_t stream);
// Cross-entropy forward over logits [n, v] (any float dtype) and targets [n] (i32/i64, each in
// [0, v) or ignore_index): row_loss (f32 [n]; data == nullptr: `scratch` of n floats is used)
// gets each row's logsumexp - logit[target] (0 when ignored); loss_sum (f32 0-d) their sum in
// fp64 in a fixed order, num_valid (i64 0-d) the count of rows not ignored.
cudaError_t LaunchCrossEntropyForward(const CuTensor& loss_sum, const CuTensor& num_valid,
                                      const CuTensor& row_loss, const CuTensor& logits,
                                      const CuTensor& targets, int64_t ignore_index,
                                      float* scratch, cudaStream_t stream);
// dlogits [n, v] f32 = (softmax(logits) - onehot(target)) * scale, zeros for ignored rows.
// dlogits may alias logits exactly (f32).
cudaError_t LaunchCrossEntropyBackward(const CuTensor& dlogits, const CuTensor& logits,
                                       const CuTensor& targets, float scale, int64_t ignore_index,
                                       cudaStream_t stream);
// (end of training kernels section)

// ---- Training: attention forward with log-sum-exp, and its backward ----
// (attention_backward_kernels.cu.) The backward recomputes the softmax tile by tile from the
// saved lse; dk/dv sum over the query heads of their group in a fixed order (no atomics).

// The training forward: out and args.lse (which must be set), with query rows in tiles that
// share K/V tiles in shared memory. Head dims up to kAttentionBackwardMaxHeadDim (else
// cudaErrorInvalidValue; LaunchAttention with AttentionArgs::lse set serves any head dim);
// b and n_h up to 65535.
cudaError_t LaunchAttentionForwardLse(const AttentionArgs& args, cudaStream_t stream);

struct AttentionBackwardArgs {
  CuTensor dq;    // f32 [b, n_h, s_q, h_d], accumulated into (+=)
  CuTensor dk;    // f32 [b, n_kv, s_kv, h_d], accumulated into
  CuTensor dv;    // f32 [b, n_kv, s_kv, h_d], accumulated into
  CuTensor dy;    // f32 [b, n_h, s_q, h_d]
  CuTensor q;     // [b, n_h, s_q, h_d], any float dtype
  CuTensor k;     // [b, n_kv, s_kv, h_d], any float dtype
  CuTensor v;     // [b, n_kv, s_kv, h_d], any float dtype
  CuTensor out;   // the forward's output (saved or recomputed), any float dtype
  CuTensor lse;   // f32 [b, n_h, s_q] from the forward
  CuTensor mask;  // bool [b, s_q, s_kv]; data == nullptr when absent
  bool causal = false;
  float scale = 1.f;  // already resolved (never 0)
};

// The largest head dim LaunchAttentionBackward supports.
constexpr int64_t kAttentionBackwardMaxHeadDim = 256;
// Device scratch LaunchAttentionBackward needs (two f32 per query row).
size_t AttentionBackwardWorkspaceBytes(const AttentionBackwardArgs& args);
// dq, dk, dv += the gradients of attention (see ops.h AttentionBackward). Any strides; the
// gradients must not overlap each other or the inputs. cudaErrorInvalidValue for a head dim
// above kAttentionBackwardMaxHeadDim.
cudaError_t LaunchAttentionBackward(const AttentionBackwardArgs& args, void* workspace,
                                    cudaStream_t stream);
// (end of attention training kernels section)

// ---- Dropout (dropout_kernels.cu) ----

// out[i] = (w >> 8) < drop_below ? 0 : x[i] * scale, where w is Philox4x32-10 word number
// offset + i of stream `seed` (core/random.h's numbering) and i the row-major index over the
// shape. Equal shapes, float dtypes; out may alias x exactly.
cudaError_t LaunchDropout(const CuTensor& out, const CuTensor& x, uint32_t drop_below, float scale,
                          uint64_t seed, uint64_t offset, cudaStream_t stream);
// (end of dropout section)

// ---- Training: optimizer updates (optim_kernels.cu) ----
// Flat, contiguous buffers of n elements. The f32 scalars come from ops::AdamWScalars /
// ops::SgdScalars (op_types.h), whose comments give the formulas; the kernels use the CPU
// backend's f32 formulas (SGD: its fused multiply-adds), so the two agree to f32 rounding.

struct AdamWArgs {
  float decay, step_size, bc2_sqrt, w1, beta2, w2, eps;
  bool lerp_low;
};
// p: the f32 parameter or master copy; out_bf16: null, or the bf16 parameter that receives
// the rounding of the updated p; g: f32 gradient; m, v: f32 moments.
cudaError_t LaunchAdamW(float* p, uint16_t* out_bf16, const float* g, float* m, float* v,
                        int64_t n, const AdamWArgs& args, cudaStream_t stream);

struct SgdArgs {
  float lr, wd, mu, keep;
  bool decay, momentum, first, nesterov;
};
// buf: the f32 momentum buffer (null without momentum); the rest as LaunchAdamW.
cudaError_t LaunchSgd(float* p, uint16_t* out_bf16, const float* g, float* buf, int64_t n,
                      const SgdArgs& args, cudaStream_t stream);

// Scratch bytes LaunchSquaredNorm needs for n elements.
size_t SquaredNormWorkspaceBytes(int64_t n);
// Writes sum(x[i]²) over [0, n) as one double into device memory `result`: fp64 partial sums
// over fixed chunks of 2^14 elements (a fixed block tree within a chunk), then one block adds
// the partials in a fixed order. Deterministic (no atomics); n == 0 writes 0.
cudaError_t LaunchSquaredNorm(double* result, const float* x, int64_t n, void* workspace,
                              size_t workspace_bytes, cudaStream_t stream);
// (end of optimizer updates section)

}  // namespace cuda
}  // namespace cctune

#endif  // CCTUNE_KERNELS_CUDA_KERNELS_H_
