#include "kernels/cpu/adamw8bit.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace cctune {
namespace cpu {
namespace {

constexpr int kExponentBits = 7;
// Blocks per OpenMP work item and the size below which the update stays on one thread.
constexpr int64_t kBlocksPerTask = 64;
constexpr int64_t kParallelThreshold = 1 << 15;

// bitsandbytes' dynamic map: for decade i (0..6) the midpoints of an even split of [0.1, 1]
// into 2^i (signed) or 2^(i+1) (unsigned) parts, times 10^(i - 6), mirrored for signed;
// then 0 and 1. 127 * 2 + 2 (signed) and 254 + 2 (unsigned) entries.
std::array<float, 256> MakeDynamicMap(bool is_signed) {
  std::vector<double> data;
  for (int i = 0; i < kExponentBits; ++i) {
    const int parts = is_signed ? (1 << i) : (1 << (i + 1));
    const double scale = std::pow(10.0, i - (kExponentBits - 1));
    for (int k = 0; k < parts; ++k) {
      const double lo = 0.1 + 0.9 * k / parts, hi = 0.1 + 0.9 * (k + 1) / parts;
      const double mean = scale * (lo + hi) / 2;
      data.push_back(mean);
      if (is_signed) data.push_back(-mean);
    }
  }
  data.push_back(0.0);
  data.push_back(1.0);
  std::sort(data.begin(), data.end());
  std::array<float, 256> map{};
  for (size_t k = 0; k < map.size(); ++k) map[k] = static_cast<float>(data[k]);
  return map;
}

uint8_t ZeroCode(const std::array<float, 256>& map) { return QuantizeNearest(map, 0.0f); }

void UpdateBlock(float* p, bf16* out, const float* g, uint8_t* m_q, float* m_absmax,
                 uint8_t* v_q, float* v_absmax, int64_t n, const AdamW8bitScalars& s,
                 const std::array<float, 256>& ms, const std::array<float, 256>& mu) {
  float m[kAdamW8bitBlock], v[kAdamW8bitBlock];
  const float am = *m_absmax, av = *v_absmax;
  const float w1 = s.w1, w2 = s.w2;
  float new_am = 0, new_av = 0;
  for (int64_t k = 0; k < n; ++k) {
    const float gk = g[k];
    const float mk = s.beta1 * (ms[m_q[k]] * am) + w1 * gk;
    const float vk = s.beta2 * (mu[v_q[k]] * av) + w2 * gk * gk;
    m[k] = mk;
    v[k] = vk;
    new_am = std::max(new_am, std::fabs(mk));
    new_av = std::max(new_av, vk);
    const float denom = std::sqrt(vk) / s.bc2_sqrt + s.eps;
    p[k] = p[k] * s.decay - s.step_size * (mk / denom);
    if (out != nullptr) out[k] = FloatToBf16(p[k]);
  }
  const uint8_t m_zero = ZeroCode(ms), v_zero = ZeroCode(mu);
  for (int64_t k = 0; k < n; ++k) {
    m_q[k] = new_am > 0 ? QuantizeNearest(ms, m[k] / new_am) : m_zero;
    v_q[k] = new_av > 0 ? QuantizeNearest(mu, v[k] / new_av) : v_zero;
  }
  *m_absmax = new_am;
  *v_absmax = new_av;
}

}  // namespace

const std::array<float, 256>& DynamicQuantMapSigned() {
  static const std::array<float, 256> map = MakeDynamicMap(true);
  return map;
}

const std::array<float, 256>& DynamicQuantMapUnsigned() {
  static const std::array<float, 256> map = MakeDynamicMap(false);
  return map;
}

uint8_t QuantizeNearest(const std::array<float, 256>& map, float x) {
  // The first entry >= x, then the nearer of it and the one below.
  const int hi = static_cast<int>(std::lower_bound(map.begin(), map.end(), x) - map.begin());
  if (hi == 0) return 0;
  if (hi == 256) return 255;
  return (x - map[hi - 1]) <= (map[hi] - x) ? static_cast<uint8_t>(hi - 1)
                                            : static_cast<uint8_t>(hi);
}

void AdamW8bitUpdate(float* p, bf16* out, const float* g, uint8_t* m_q, float* m_absmax,
                     uint8_t* v_q, float* v_absmax, int64_t n, const AdamW8bitScalars& s) {
  const std::array<float, 256>& ms = DynamicQuantMapSigned();
  const std::array<float, 256>& mu = DynamicQuantMapUnsigned();
  const int64_t blocks = (n + kAdamW8bitBlock - 1) / kAdamW8bitBlock;
  const int64_t tasks = (blocks + kBlocksPerTask - 1) / kBlocksPerTask;
#pragma omp parallel for schedule(static) if (n > kParallelThreshold)
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t last = std::min(blocks, (t + 1) * kBlocksPerTask);
    for (int64_t b = t * kBlocksPerTask; b < last; ++b) {
      const int64_t begin = b * kAdamW8bitBlock;
      const int64_t len = std::min(kAdamW8bitBlock, n - begin);
      UpdateBlock(p + begin, out != nullptr ? out + begin : nullptr, g + begin, m_q + begin,
                  m_absmax + b, v_q + begin, v_absmax + b, len, s, ms, mu);
    }
  }
}

}  // namespace cpu
}  // namespace cctune
