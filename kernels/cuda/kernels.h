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
};

// How many key splits the decode-friendly split path uses (1: the direct kernel), and the
// f32 scratch it needs.
int AttentionNumSplits(const AttentionArgs& args, int num_sms);
size_t AttentionWorkspaceBytes(const AttentionArgs& args, int num_splits);
cudaError_t LaunchAttention(const AttentionArgs& args, int num_splits, void* workspace,
                            cudaStream_t stream);

// ---- Training: backward kernels (elementwise, row-wise, embedding, loss) ----
// (end of training kernels section)

// ---- Training: attention forward with log-sum-exp, and its backward ----
// (end of attention training kernels section)

}  // namespace cuda
}  // namespace cctune

#endif  // CCTUNE_KERNELS_CUDA_KERNELS_H_
