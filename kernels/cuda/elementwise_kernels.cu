// Elementwise kernels: Add / Mul (with broadcast through stride-0 dims), SiluMul, Scale.
#include "kernels/cuda/device_helpers.cuh"
#include "kernels/cuda/kernels.h"

namespace cctune {
namespace cuda {
namespace {

__device__ __forceinline__ void Offsets3(const CuTensor& o, const CuTensor& a, const CuTensor& b,
                                         int64_t i, int64_t* oo, int64_t* oa, int64_t* ob) {
  int64_t x = 0, y = 0, z = 0;
#pragma unroll
  for (int d = kCuMaxDims - 1; d >= 0; --d) {
    if (d < o.ndim) {
      const int64_t s = o.shape[d];
      const int64_t q = i / s;
      const int64_t r = i - q * s;
      x += r * o.strides[d];
      y += r * a.strides[d];
      z += r * b.strides[d];
      i = q;
    }
  }
  *oo = x;
  *oa = y;
  *ob = z;
}

template <BinaryOp kOp>
__device__ __forceinline__ float ApplyF(float a, float b) {
  if (kOp == BinaryOp::kAdd) return a + b;
  if (kOp == BinaryOp::kMul) return a * b;
  return a / (1.f + expf(-a)) * b;  // kSiluMul: a is the gate
}

template <BinaryOp kOp>
__global__ void BinaryKernel(CuTensor out, CuTensor a, CuTensor b, int64_t n, bool int_math) {
  const bool dense = out.ndim == 1 && out.strides[0] == 1 && a.strides[0] == 1 && b.strides[0] == 1;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    int64_t oo = i, oa = i, ob = i;
    if (!dense) Offsets3(out, a, b, i, &oo, &oa, &ob);
    if (int_math) {
      const long long x = LoadI(a.data, oa, a.dtype), y = LoadI(b.data, ob, b.dtype);
      StoreI(out.data, oo, out.dtype, kOp == BinaryOp::kAdd ? x + y : x * y);
    } else {
      StoreF(out.data, oo, out.dtype,
             ApplyF<kOp>(LoadF(a.data, oa, a.dtype), LoadF(b.data, ob, b.dtype)));
    }
  }
}

// f32 fast path for dense operands of one dtype (the common case in a model).
template <BinaryOp kOp>
__global__ void BinaryDenseF32Kernel(float* out, const float* a, const float* b, int64_t n) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    out[i] = ApplyF<kOp>(a[i], b[i]);
  }
}

__global__ void ScaleKernel(CuTensor out, CuTensor x, float alpha, int64_t n) {
  const bool dense = out.ndim == 1 && out.strides[0] == 1 && x.strides[0] == 1;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    int64_t oo = i, ox = i;
    if (!dense) {
      oo = OffsetOf(out, out.ndim, i);
      ox = OffsetOf(x, x.ndim, i);
    }
    StoreF(out.data, oo, out.dtype, alpha * LoadF(x.data, ox, x.dtype));
  }
}

template <BinaryOp kOp>
cudaError_t Dispatch(const CuTensor& out, const CuTensor& a, const CuTensor& b, int64_t n,
                     cudaStream_t stream) {
  const bool all_f32 = out.dtype == kDtF32 && a.dtype == kDtF32 && b.dtype == kDtF32;
  if (all_f32 && IsDense1D(out) && IsDense1D(a) && IsDense1D(b)) {
    BinaryDenseF32Kernel<kOp><<<GridFor(n), kThreads, 0, stream>>>(
        static_cast<float*>(out.data), static_cast<const float*>(a.data),
        static_cast<const float*>(b.data), n);
  } else {
    const bool int_math = kOp != BinaryOp::kSiluMul && !IsFloatingCodeHost(out.dtype);
    BinaryKernel<kOp><<<GridFor(n), kThreads, 0, stream>>>(out, a, b, n, int_math);
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchBinary(BinaryOp op, const CuTensor& out_in, const CuTensor& a_in,
                         const CuTensor& b_in, cudaStream_t stream) {
  const int64_t n = out_in.numel();
  if (n == 0) return cudaSuccess;
  CuTensor ops[3] = {out_in, a_in, b_in};
  CollapseDims(ops, 3);
  switch (op) {
    case BinaryOp::kAdd:
      return Dispatch<BinaryOp::kAdd>(ops[0], ops[1], ops[2], n, stream);
    case BinaryOp::kMul:
      return Dispatch<BinaryOp::kMul>(ops[0], ops[1], ops[2], n, stream);
    case BinaryOp::kSiluMul:
      return Dispatch<BinaryOp::kSiluMul>(ops[0], ops[1], ops[2], n, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t LaunchScale(const CuTensor& out_in, const CuTensor& x_in, float alpha,
                        cudaStream_t stream) {
  const int64_t n = out_in.numel();
  if (n == 0) return cudaSuccess;
  CuTensor ops[2] = {out_in, x_in};
  CollapseDims(ops, 2);
  ScaleKernel<<<GridFor(n), kThreads, 0, stream>>>(ops[0], ops[1], alpha, n);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace cctune
