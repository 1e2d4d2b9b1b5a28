// Strided copy with dtype conversion (the cuda DeviceInterface's StridedCopy).
#include "kernels/cuda/device_helpers.cuh"
#include "kernels/cuda/kernels.h"

namespace cctune {
namespace cuda {
namespace {

// Offsets of linear index i in two tensors of one shape (dst's).
__device__ __forceinline__ void Offsets2(const CuTensor& a, const CuTensor& b, int64_t i,
                                         int64_t* oa, int64_t* ob) {
  int64_t x = 0, y = 0;
#pragma unroll
  for (int d = kCuMaxDims - 1; d >= 0; --d) {
    if (d < a.ndim) {
      const int64_t s = a.shape[d];
      const int64_t q = i / s;
      const int64_t r = i - q * s;
      x += r * a.strides[d];
      y += r * b.strides[d];
      i = q;
    }
  }
  *oa = x;
  *ob = y;
}

template <typename T>
__global__ void CopySameKernel(CuTensor dst, CuTensor src, int64_t n) {
  T* d = static_cast<T*>(dst.data);
  const T* s = static_cast<const T*>(src.data);
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    int64_t od, os;
    Offsets2(dst, src, i, &od, &os);
    d[od] = s[os];
  }
}

__device__ __forceinline__ void ConvertElem(void* d, int64_t od, int dt, const void* s, int64_t os,
                                            int st) {
  if (IsFloatingCode(dt)) {
    StoreF(d, od, dt, LoadF(s, os, st));
  } else if (dt == kDtBool) {
    const bool nz = IsFloatingCode(st) ? LoadF(s, os, st) != 0.f : LoadI(s, os, st) != 0;
    static_cast<uint8_t*>(d)[od] = nz;
  } else {
    StoreI(d, od, dt, LoadI(s, os, st));
  }
}

__global__ void ConvertKernel(CuTensor dst, CuTensor src, int64_t n) {
  const bool dense = dst.ndim == 1 && dst.strides[0] == 1 && src.strides[0] == 1;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    int64_t od = i, os = i;
    if (!dense) Offsets2(dst, src, i, &od, &os);
    ConvertElem(dst.data, od, dst.dtype, src.data, os, src.dtype);
  }
}

int ElemSize(int dt) {
  switch (dt) {
    case kDtF32:
    case kDtI32:
      return 4;
    case kDtBF16:
    case kDtF16:
      return 2;
    case kDtI64:
      return 8;
    default:
      return 1;
  }
}

}  // namespace

cudaError_t LaunchStridedCopy(const CuTensor& dst_in, const CuTensor& src_in, cudaStream_t stream) {
  const int64_t n = dst_in.numel();
  if (n == 0) return cudaSuccess;
  CuTensor ops[2] = {dst_in, src_in};
  CollapseDims(ops, 2);
  const CuTensor& dst = ops[0];
  const CuTensor& src = ops[1];
  if (dst.dtype == src.dtype) {
    const int es = ElemSize(dst.dtype);
    if (IsDense1D(dst) && IsDense1D(src)) {
      return cudaMemcpyAsync(dst.data, src.data, static_cast<size_t>(n) * es,
                             cudaMemcpyDeviceToDevice, stream);
    }
    switch (es) {
      case 1:
        CopySameKernel<uint8_t><<<GridFor(n), kThreads, 0, stream>>>(dst, src, n);
        break;
      case 2:
        CopySameKernel<uint16_t><<<GridFor(n), kThreads, 0, stream>>>(dst, src, n);
        break;
      case 4:
        CopySameKernel<uint32_t><<<GridFor(n), kThreads, 0, stream>>>(dst, src, n);
        break;
      default:
        CopySameKernel<unsigned long long><<<GridFor(n), kThreads, 0, stream>>>(dst, src, n);
        break;
    }
    return cudaGetLastError();
  }
  ConvertKernel<<<GridFor(n), kThreads, 0, stream>>>(dst, src, n);
  return cudaGetLastError();
}

}  // namespace cuda
}  // namespace cctune
