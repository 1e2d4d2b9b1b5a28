#include "kernels/cpu/nf4.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace cctune {
namespace cpu {
namespace {

constexpr int64_t kParallelThreshold = 1 << 16;

uint8_t NearestLevel(float v) {
  const std::array<float, 16>& levels = Nf4Levels();
  int best = 0;
  float best_diff = std::fabs(v - levels[0]);
  for (int k = 1; k < 16; ++k) {
    const float d = std::fabs(v - levels[k]);
    if (d < best_diff) {  // strict: ties keep the lower index
      best = k;
      best_diff = d;
    }
  }
  return static_cast<uint8_t>(best);
}

// The dequantized block scales.
std::vector<float> Scales(const Nf4Quantized& q) {
  std::vector<float> s(q.quantized_scalers.size());
  for (size_t b = 0; b < s.size(); ++b) {
    s[b] = q.quantized_scalers[b] / q.quantization_factor[b / kNf4ScalerBlockSize] +
           q.scaler_mean;
  }
  return s;
}

template <typename T, typename Store>
void Dequantize(const Nf4Quantized& q, T* out, const Store& store) {
  const std::array<float, 16>& levels = Nf4Levels();
  const std::vector<float> scales = Scales(q);
  const int64_t blocks = static_cast<int64_t>(scales.size());
#pragma omp parallel for schedule(static) if (q.numel > kParallelThreshold)
  for (int64_t b = 0; b < blocks; ++b) {
    const float s = scales[b];
    const uint8_t* c = q.codes.data() + b * (kNf4BlockSize / 2);
    T* o = out + b * kNf4BlockSize;
    for (int64_t k = 0; k < kNf4BlockSize / 2; ++k) {
      o[2 * k] = store(levels[c[k] >> 4] * s);
      o[2 * k + 1] = store(levels[c[k] & 0xF] * s);
    }
  }
}

}  // namespace

const std::array<float, 16>& Nf4Levels() {
  static const std::array<float, 16> levels = {
      -1.0000f, -0.6962f, -0.5251f, -0.3949f, -0.2844f, -0.1848f, -0.0911f, 0.0000f,
      0.0796f,  0.1609f,  0.2461f,  0.3379f,  0.4407f,  0.5626f,  0.7230f,  1.0000f};
  return levels;
}

absl::StatusOr<Nf4Quantized> QuantizeNf4(const float* x, int64_t n, const std::string& what) {
  constexpr int64_t kGroup = kNf4BlockSize * kNf4ScalerBlockSize;
  if (n <= 0 || n % kGroup != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "NF4: ", what, " has ", n, " elements; NF4 (block_size ", kNf4BlockSize,
        ", scaler_block_size ", kNf4ScalerBlockSize, ") needs a positive multiple of ", kGroup));
  }
  Nf4Quantized q;
  q.numel = n;
  const int64_t blocks = n / kNf4BlockSize;
  std::vector<float> absmax(blocks);
  for (int64_t b = 0; b < blocks; ++b) {
    float m = 0;
    for (int64_t k = 0; k < kNf4BlockSize; ++k) {
      const float v = x[b * kNf4BlockSize + k];
      if (!std::isfinite(v)) {
        return absl::InvalidArgumentError(absl::StrCat("NF4: ", what, " has a non-finite value (",
                                                       v, ") at element ",
                                                       b * kNf4BlockSize + k));
      }
      m = std::max(m, std::fabs(v));
    }
    absmax[b] = m;
  }
  double sum = 0;
  for (float m : absmax) sum += m;
  q.scaler_mean = static_cast<float>(sum / blocks);
  const int64_t groups = blocks / kNf4ScalerBlockSize;
  q.quantized_scalers.resize(blocks);
  q.quantization_factor.resize(groups);
  for (int64_t g = 0; g < groups; ++g) {
    float m = 0;
    for (int64_t k = 0; k < kNf4ScalerBlockSize; ++k) {
      m = std::max(m, std::fabs(absmax[g * kNf4ScalerBlockSize + k] - q.scaler_mean));
    }
    // 256 / (2 * absmax): an all-equal group (m = 0) gets an infinite factor in torchao;
    // its scales are then the mean exactly, which a factor of 1 with zero codes also gives.
    const float factor = m > 0 ? 256.0f / (2.0f * m) : 1.0f;
    q.quantization_factor[g] = factor;
    for (int64_t k = 0; k < kNf4ScalerBlockSize; ++k) {
      const int64_t b = g * kNf4ScalerBlockSize + k;
      const float r = std::nearbyint((absmax[b] - q.scaler_mean) * factor);
      q.quantized_scalers[b] = static_cast<int8_t>(std::clamp(r, -128.0f, 127.0f));
    }
  }
  q.codes.resize(n / 2);
#pragma omp parallel for schedule(static) if (n > kParallelThreshold)
  for (int64_t b = 0; b < blocks; ++b) {
    const float m = absmax[b];
    for (int64_t k = 0; k < kNf4BlockSize; k += 2) {
      const int64_t i = b * kNf4BlockSize + k;
      // An all-zero block: torchao divides 0 by 0 (NaN, index 0); here the level 0.0.
      const uint8_t hi = m > 0 ? NearestLevel(x[i] / m) : 7;
      const uint8_t lo = m > 0 ? NearestLevel(x[i + 1] / m) : 7;
      q.codes[i / 2] = static_cast<uint8_t>(hi << 4 | lo);
    }
  }
  return q;
}

void DequantizeNf4(const Nf4Quantized& q, float* out) {
  Dequantize(q, out, [](float v) { return v; });
}

void DequantizeNf4(const Nf4Quantized& q, bf16* out) {
  Dequantize(q, out, [](float v) { return FloatToBf16(v); });
}

}  // namespace cpu
}  // namespace cctune
