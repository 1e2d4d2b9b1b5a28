#include "kernels/cpu/optim.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/dtype.h"

// The loops moved here from training/optim.cc unchanged in their arithmetic (and built with
// the same flags: no -O3, -fno-math-errno), so CPU training stays bit-identical to the
// results (demo weights, torchtune parity goldens, resume tests) it gave before.

namespace cctune {
namespace cpu {
namespace {

// Loops shorter than this stay on one thread (the fork/join would cost more than it saves).
constexpr int64_t kParallelThreshold = 1 << 15;
// Work is split into fixed chunks of this many elements: reductions (SquaredNorm) then sum in
// the same order for any thread count.
constexpr int64_t kChunk = 1 << 14;

// a * b + c with one rounding where the CPU has FMA (as torch's vectorized kernels compute
// `x.add(y, alpha=a)`), two roundings otherwise.
inline float Fma(float a, float b, float c) {
#if defined(__FMA__)
  return std::fma(a, b, c);
#else
  return a * b + c;
#endif
}

// Runs fn(begin, end) over fixed chunks of [0, n), on all cores when n is large. Each
// chunk's loop is a plain SIMD loop (branch-free: choices are template parameters).
template <typename Fn>
void ForChunks(int64_t n, const Fn& fn) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n > kParallelThreshold)
  for (int64_t c = 0; c < chunks; ++c) fn(c * kChunk, std::min(n, (c + 1) * kChunk));
}

// One AdamW update of [0, n): p is the f32 parameter or master copy; out, when not null,
// receives the bf16 rounding of the updated p.
template <bool kLerpLow>
void AdamWKernel(float* __restrict p, const float* __restrict g, float* __restrict m,
                 float* __restrict v, bf16* __restrict out, int64_t n,
                 const ops::AdamWScalars& s) {
  const float decay = s.decay, step_size = s.step_size, bc2_sqrt = s.bc2_sqrt, w1 = s.w1;
  const float beta2 = s.beta2, w2 = s.w2, eps = s.eps;
#pragma omp simd
  for (int64_t k = 0; k < n; ++k) {
    const float gk = g[k];
    // torch's lerp picks its formula by the weight.
    const float mk = kLerpLow ? m[k] + w1 * (gk - m[k]) : gk - (gk - m[k]) * (1.0f - w1);
    const float vk = v[k] * beta2 + w2 * gk * gk;
    const float denom = std::sqrt(vk) / bc2_sqrt + eps;
    m[k] = mk;
    v[k] = vk;
    p[k] = p[k] * decay - step_size * (mk / denom);
  }
  if (out != nullptr) {
#pragma omp simd
    for (int64_t k = 0; k < n; ++k) out[k] = FloatToBf16(p[k]);
  }
}

// One SGD update of [0, n) with the same roundings as torch's kernels (each
// `x.add(y, alpha=a)` is one fused multiply-add, each mul_ rounds on its own).
template <bool kDecay, bool kMomentum, bool kFirst, bool kNesterov>
void SgdKernel(float* __restrict p, const float* __restrict g, float* __restrict buf,
               bf16* __restrict out, int64_t n, const ops::SgdScalars& s) {
  const float lr = s.lr, wd = s.wd, mu = s.mu, keep = s.keep;
#pragma omp simd
  for (int64_t k = 0; k < n; ++k) {
    float d = kDecay ? Fma(p[k], wd, g[k]) : g[k];
    if (kMomentum) {
      const float scaled = buf[k] * mu;
      const float bk = kFirst ? d : Fma(d, keep, scaled);
      buf[k] = bk;
      d = kNesterov ? Fma(bk, mu, d) : bk;
    }
    p[k] = Fma(d, -lr, p[k]);
  }
  if (out != nullptr) {
#pragma omp simd
    for (int64_t k = 0; k < n; ++k) out[k] = FloatToBf16(p[k]);
  }
}

template <bool kDecay, bool kMomentum>
void SgdDispatch(bool first, bool nesterov, float* p, const float* g, float* buf, bf16* out,
                 int64_t n, const ops::SgdScalars& s) {
  if (first) {
    nesterov ? SgdKernel<kDecay, kMomentum, true, true>(p, g, buf, out, n, s)
             : SgdKernel<kDecay, kMomentum, true, false>(p, g, buf, out, n, s);
  } else {
    nesterov ? SgdKernel<kDecay, kMomentum, false, true>(p, g, buf, out, n, s)
             : SgdKernel<kDecay, kMomentum, false, false>(p, g, buf, out, n, s);
  }
}

}  // namespace

absl::Status AdamWUpdate(Tensor& param, Tensor* master, Tensor& exp_avg, Tensor& exp_avg_sq,
                         const Tensor& grad, const ops::AdamWScalars& s) {
  float* p = master != nullptr ? master->data<float>() : param.data<float>();
  const float* g = grad.data<float>();
  float* m = exp_avg.data<float>();
  float* v = exp_avg_sq.data<float>();
  bf16* out = master != nullptr ? param.data<bf16>() : nullptr;
  const bool lerp_low = s.lerp_low;
  ForChunks(param.numel(), [&](int64_t begin, int64_t end) {
    bf16* o = out != nullptr ? out + begin : nullptr;
    if (lerp_low) {
      AdamWKernel<true>(p + begin, g + begin, m + begin, v + begin, o, end - begin, s);
    } else {
      AdamWKernel<false>(p + begin, g + begin, m + begin, v + begin, o, end - begin, s);
    }
  });
  return absl::OkStatus();
}

absl::Status SgdUpdate(Tensor& param, Tensor* master, Tensor* momentum_buffer,
                       const Tensor& grad, const ops::SgdScalars& s) {
  const bool decay = s.decay, momentum = s.momentum, first = s.first, nesterov = s.nesterov;
  float* p = master != nullptr ? master->data<float>() : param.data<float>();
  const float* g = grad.data<float>();
  float* buf = momentum ? momentum_buffer->data<float>() : nullptr;
  bf16* out = master != nullptr ? param.data<bf16>() : nullptr;
  ForChunks(param.numel(), [&](int64_t begin, int64_t end) {
    float* pb = p + begin;
    const float* gb = g + begin;
    float* bb = buf != nullptr ? buf + begin : nullptr;
    bf16* ob = out != nullptr ? out + begin : nullptr;
    const int64_t n = end - begin;
    if (decay) {
      momentum ? SgdDispatch<true, true>(first, nesterov, pb, gb, bb, ob, n, s)
               : SgdDispatch<true, false>(first, nesterov, pb, gb, bb, ob, n, s);
    } else {
      momentum ? SgdDispatch<false, true>(first, nesterov, pb, gb, bb, ob, n, s)
               : SgdDispatch<false, false>(first, nesterov, pb, gb, bb, ob, n, s);
    }
  });
  return absl::OkStatus();
}

absl::Status SquaredNorm(double* sum, const Tensor& x) {
  const float* data = x.data<float>();
  const int64_t n = x.numel();
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(chunks, 0.0);
#pragma omp parallel for schedule(static) if (n > kParallelThreshold)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kChunk, end = std::min(n, begin + kChunk);
    double s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t k = begin; k < end; ++k) s += static_cast<double>(data[k]) * data[k];
    partial[c] = s;
  }
  double total = *sum;
  for (double s : partial) total += s;
  *sum = total;
  return absl::OkStatus();
}

}  // namespace cpu
}  // namespace cctune
