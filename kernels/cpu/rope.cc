#include "kernels/cpu/rope.h"

#include <cmath>
#include <vector>

#include "absl/container/inlined_vector.h"

#include "absl/strings/str_cat.h"
#include "kernels/cpu/cpu_util.h"

namespace cctune {
namespace cpu {

absl::Status RopeCache(Tensor& cos, Tensor& sin, const Tensor& inv_freq) {
  const int64_t len = cos.size(0), half = cos.size(1);
  FloatBuffer theta(half);
  LoadF32(inv_freq.raw_data(), DType::kF32, inv_freq.stride(0), half, theta.data());
  const float* th = theta.data();
  float* cp = cos.data<float>();
  float* sp = sin.data<float>();
  const int64_t cs0 = cos.stride(0), cs1 = cos.stride(1);
  const int64_t ss0 = sin.stride(0), ss1 = sin.stride(1);
#pragma omp parallel for schedule(static) if (len * half >= (1 << 14))
  for (int64_t p = 0; p < len; ++p) {
    for (int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(p) * th[i];
      cp[p * cs0 + i * cs1] = static_cast<float>(std::cos(static_cast<double>(angle)));
      sp[p * ss0 + i * ss1] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
  }
  return absl::OkStatus();
}

namespace {

// Rotates x by the angles at `positions` (sin_sign = 1) or by their negatives (sin_sign = -1,
// the transposed rotation that the backward applies).
absl::Status Rotate(const char* op, Tensor& out, const Tensor& x, const Tensor& cos,
                    const Tensor& sin, const Tensor& positions, ops::RopePairing pairing,
                    float sin_sign) {
  const int64_t b = x.size(0), s = x.size(1), n = x.size(2), hd = x.size(3);
  const int64_t half = hd / 2, max_len = cos.size(0);
  // Positions [b, s] or [s] as int64, checked up front so that nothing is written on error.
  const StridedView pv = positions.strided_view();
  const bool per_batch = positions.dim() == 2;
  const int64_t npos = per_batch ? b * s : s;
  // Inline up to 16 positions: a decode step (batch <= 16) allocates nothing here.
  absl::InlinedVector<int64_t, 16> pos(npos);
  for (int64_t i = 0; i < npos; ++i) {
    const int64_t off = ElementOffset(pv, i);
    pos[i] = positions.dtype() == DType::kI64 ? static_cast<const int64_t*>(pv.data)[off]
                                              : static_cast<const int32_t*>(pv.data)[off];
    if (pos[i] < 0 || pos[i] >= max_len) {
      return absl::OutOfRangeError(absl::StrCat(op, ": position ", pos[i], " at index ", i,
                                                " of positions ", ShapeToString(positions.shape()),
                                                " is outside [0, ", max_len, ")"));
    }
  }
  const float* cbase = cos.data<float>();
  const float* sbase = sin.data<float>();
  const int64_t cs0 = cos.stride(0), cs1 = cos.stride(1);
  const int64_t ss0 = sin.stride(0), ss1 = sin.stride(1);
  const DType xt = x.dtype(), ot = out.dtype();
  const void* xbase = x.raw_data();
  void* obase = out.raw_data();
  const int64_t rows = b * s * n;
  const int64_t xs0 = x.stride(0), xs1 = x.stride(1), xs2 = x.stride(2), xs3 = x.stride(3);
  const int64_t os0 = out.stride(0), os1 = out.stride(1), os2 = out.stride(2), os3 = out.stride(3);
  const bool interleaved = pairing == ops::RopePairing::kInterleaved;
#pragma omp parallel if (rows * hd >= (1 << 14))
  {
    FloatBuffer buf(3 * hd);
    float* row = buf.data();
    float* cbuf = row + hd;
    float* sbuf = cbuf + half;
    int64_t loaded_pos = -1;
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t hi = r % n, si = (r / n) % s, bi = r / (n * s);
      const int64_t p = pos[per_batch ? bi * s + si : si];
      const float* c = cbase + p * cs0;
      const float* sn = sbase + p * ss0;
      if (cs1 != 1 || ss1 != 1) {
        if (p != loaded_pos) {
          for (int64_t i = 0; i < half; ++i) cbuf[i] = c[i * cs1];
          for (int64_t i = 0; i < half; ++i) sbuf[i] = sin_sign * sn[i * ss1];
          loaded_pos = p;
        }
        c = cbuf;
        sn = sbuf;
      } else if (sin_sign != 1.f) {
        if (p != loaded_pos) {
          for (int64_t i = 0; i < half; ++i) sbuf[i] = -sn[i];
          loaded_pos = p;
        }
        sn = sbuf;
      }
      const int64_t xoff = bi * xs0 + si * xs1 + hi * xs2;
      const int64_t ooff = bi * os0 + si * os1 + hi * os2;
      const float* xs = LoadF32Or(ElemAddr(xbase, xt, xoff), xt, xs3, hd, row);
      float* y = row;  // in place is fine: each pair is read before it is written
      if (interleaved) {
        for (int64_t i = 0; i < half; ++i) {
          const float x0 = xs[2 * i], x1 = xs[2 * i + 1];
          y[2 * i] = x0 * c[i] - x1 * sn[i];
          y[2 * i + 1] = x1 * c[i] + x0 * sn[i];
        }
      } else {
        for (int64_t i = 0; i < half; ++i) {
          const float x0 = xs[i], x1 = xs[i + half];
          y[i] = x0 * c[i] - x1 * sn[i];
          y[i + half] = x1 * c[i] + x0 * sn[i];
        }
      }
      StoreF32(y, ElemAddr(obase, ot, ooff), ot, os3, hd);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Rope(Tensor& out, const Tensor& x, const Tensor& cos, const Tensor& sin,
                  const Tensor& positions, ops::RopePairing pairing) {
  return Rotate("Rope", out, x, cos, sin, positions, pairing, 1.f);
}

absl::Status RopeBackward(Tensor& dx, const Tensor& dy, const Tensor& cos, const Tensor& sin,
                          const Tensor& positions, ops::RopePairing pairing) {
  return Rotate("RopeBackward", dx, dy, cos, sin, positions, pairing, -1.f);
}

}  // namespace cpu
}  // namespace cctune
