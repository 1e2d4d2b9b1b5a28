#include "kernels/cpu/nf4.h"

// GCC 12's AVX-512 intrinsic headers trip a false -Wmaybe-uninitialized (GCC PR105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/isa.h"

// Each SIMD path is compiled for its own instruction set through function attributes, so this
// file builds with any -march and the paths are picked at run time (kernels/cpu/isa.h).
#define CCTUNE_NF4_AVX2 __attribute__((target("avx2,fma,f16c")))
#define CCTUNE_NF4_AVX512 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")))

namespace cctune {
namespace cpu {

using nf4_internal::Nf4Isa;

namespace {

constexpr int64_t kParallelThreshold = 1 << 16;

// Midpoints between consecutive levels: the nearest level's index is the number of midpoints
// below v (a value exactly on a midpoint keeps the lower index, as torchao's argmin does).
const std::array<float, 15>& Midpoints() {
  static const std::array<float, 15> mids = [] {
    std::array<float, 15> m{};
    const std::array<float, 16>& l = Nf4Levels();
    for (int k = 0; k < 15; ++k) m[k] = 0.5f * (l[k] + l[k + 1]);
    return m;
  }();
  return mids;
}

inline uint8_t NearestLevel(float v, const std::array<float, 15>& mids) {
  int idx = 0;
  for (int k = 0; k < 15; ++k) idx += v > mids[k];
  return static_cast<uint8_t>(idx);
}

// The dequantized scale of block b.
inline float BlockScale(const Nf4View& q, int64_t b) {
  return q.quantized_scalers[b] / q.quantization_factor[b / kNf4ScalerBlockSize] + q.scaler_mean;
}

inline float ElementScalar(const Nf4View& q, int64_t e) {
  const uint8_t c = q.codes[e / 2];
  return Nf4Levels()[e % 2 == 0 ? c >> 4 : c & 0xF] * BlockScale(q, e / kNf4BlockSize);
}

// One whole block of 64: `c` its 32 code bytes, `s` its scale.
void BlockScalar(const uint8_t* c, float s, float* o) {
  const std::array<float, 16>& levels = Nf4Levels();
  for (int64_t k = 0; k < kNf4BlockSize / 2; ++k) {
    o[2 * k] = levels[c[k] >> 4] * s;
    o[2 * k + 1] = levels[c[k] & 0xF] * s;
  }
}

// 8 code bytes -> their 16 level indices in element order, one per byte: each byte's high
// nibble, then its low nibble.
CCTUNE_NF4_AVX2 inline __m128i Indices16(const uint8_t* c) {
  const __m128i w = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(c)));
  const __m128i hi = _mm_srli_epi16(w, 4);
  const __m128i lo = _mm_slli_epi16(_mm_and_si128(w, _mm_set1_epi16(0xF)), 8);
  return _mm_or_si128(hi, lo);
}

CCTUNE_NF4_AVX2 void BlockAvx2(const uint8_t* c, float s, float* o) {
  const float* levels = Nf4Levels().data();
  const __m256 l0 = _mm256_loadu_ps(levels), l1 = _mm256_loadu_ps(levels + 8);
  const __m256 vs = _mm256_set1_ps(s);
  auto lookup = [&](__m256i idx) CCTUNE_NF4_AVX2 {
    const __m256 a = _mm256_permutevar8x32_ps(l0, idx);
    const __m256 b = _mm256_permutevar8x32_ps(l1, idx);
    // Bit 3 of the index selects the upper eight levels (moved to the sign bit for blendv).
    return _mm256_blendv_ps(a, b, _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
  };
  for (int j = 0; j < 4; ++j) {
    const __m128i idx8 = Indices16(c + 8 * j);
    const __m256i ia = _mm256_cvtepu8_epi32(idx8);
    const __m256i ib = _mm256_cvtepu8_epi32(_mm_srli_si128(idx8, 8));
    _mm256_storeu_ps(o + 16 * j, _mm256_mul_ps(lookup(ia), vs));
    _mm256_storeu_ps(o + 16 * j + 8, _mm256_mul_ps(lookup(ib), vs));
  }
}

CCTUNE_NF4_AVX512 void BlockAvx512(const uint8_t* c, float s, float* o) {
  const __m512 levels = _mm512_loadu_ps(Nf4Levels().data());
  const __m512 vs = _mm512_set1_ps(s);
  for (int j = 0; j < 4; ++j) {
    const __m512i idx = _mm512_cvtepu8_epi32(Indices16(c + 8 * j));
    _mm512_storeu_ps(o + 16 * j, _mm512_mul_ps(_mm512_permutexvar_ps(idx, levels), vs));
  }
}

template <void (*Block)(const uint8_t*, float, float*)>
void RangeWith(const Nf4View& q, int64_t begin, int64_t end, float* out) {
  int64_t e = begin;
  for (; e < end && e % kNf4BlockSize != 0; ++e) out[e - begin] = ElementScalar(q, e);
  for (; e + kNf4BlockSize <= end; e += kNf4BlockSize) {
    Block(q.codes + e / 2, BlockScale(q, e / kNf4BlockSize), out + (e - begin));
  }
  for (; e < end; ++e) out[e - begin] = ElementScalar(q, e);
}

template <typename T>
absl::Status QuantizeInto(const T* x, int64_t n, const std::string& what,
                          const Nf4MutableView& q) {
  if (n <= 0 || n % kNf4GroupSize != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "NF4: ", what, " has ", n, " elements; NF4 (block_size ", kNf4BlockSize,
        ", scaler_block_size ", kNf4ScalerBlockSize, ") needs a positive multiple of ",
        kNf4GroupSize));
  }
  if (q.numel != n) {
    return absl::InvalidArgumentError(absl::StrCat("NF4: ", what, " has ", n,
                                                   " elements but its NF4 storage ", q.numel));
  }
  const int64_t blocks = n / kNf4BlockSize;
  std::vector<float> absmax(blocks);
  int64_t bad = -1;
#pragma omp parallel for schedule(static) if (n > kParallelThreshold)
  for (int64_t b = 0; b < blocks; ++b) {
    float m = 0;
    bool finite = true;
    for (int64_t k = 0; k < kNf4BlockSize; ++k) {
      const float v = ToFloat(x[b * kNf4BlockSize + k]);
      finite &= std::isfinite(v);
      m = std::max(m, std::fabs(v));
    }
    absmax[b] = m;
    if (!finite) {
#pragma omp critical(nf4_bad)
      if (bad < 0 || b < bad / kNf4BlockSize) {
        for (int64_t k = 0; k < kNf4BlockSize; ++k) {
          if (!std::isfinite(ToFloat(x[b * kNf4BlockSize + k]))) {
            bad = b * kNf4BlockSize + k;
            break;
          }
        }
      }
    }
  }
  if (bad >= 0) {
    return absl::InvalidArgumentError(absl::StrCat("NF4: ", what, " has a non-finite value (",
                                                   ToFloat(x[bad]), ") at element ", bad));
  }
  double sum = 0;
  for (float m : absmax) sum += m;
  const float mean = static_cast<float>(sum / blocks);
  *q.scaler_mean = mean;
  const int64_t groups = blocks / kNf4ScalerBlockSize;
  for (int64_t g = 0; g < groups; ++g) {
    float m = 0;
    for (int64_t k = 0; k < kNf4ScalerBlockSize; ++k) {
      m = std::max(m, std::fabs(absmax[g * kNf4ScalerBlockSize + k] - mean));
    }
    // 256 / (2 * absmax): an all-equal group (m = 0) gets an infinite factor in torchao;
    // its scales are then the mean exactly, which a factor of 1 with zero codes also gives.
    const float factor = m > 0 ? 256.0f / (2.0f * m) : 1.0f;
    q.quantization_factor[g] = factor;
    for (int64_t k = 0; k < kNf4ScalerBlockSize; ++k) {
      const int64_t b = g * kNf4ScalerBlockSize + k;
      const float r = std::nearbyint((absmax[b] - mean) * factor);
      q.quantized_scalers[b] = static_cast<int8_t>(std::clamp(r, -128.0f, 127.0f));
    }
  }
  const std::array<float, 15>& mids = Midpoints();
#pragma omp parallel for schedule(static) if (n > kParallelThreshold)
  for (int64_t b = 0; b < blocks; ++b) {
    const float m = absmax[b];
    for (int64_t k = 0; k < kNf4BlockSize; k += 2) {
      const int64_t i = b * kNf4BlockSize + k;
      // An all-zero block: torchao divides 0 by 0 (NaN, index 0); here the level 0.0.
      const uint8_t hi = m > 0 ? NearestLevel(ToFloat(x[i]) / m, mids) : 7;
      const uint8_t lo = m > 0 ? NearestLevel(ToFloat(x[i + 1]) / m, mids) : 7;
      q.codes[i / 2] = static_cast<uint8_t>(hi << 4 | lo);
    }
  }
  return absl::OkStatus();
}

template <typename T, typename Store>
void DequantizeAll(const Nf4View& q, T* out, const Store& store) {
  // Chunks of whole blocks, each dequantized to f32 on the stack and stored.
  constexpr int64_t kChunk = 16 * kNf4BlockSize;
  const int64_t chunks = (q.numel + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (q.numel > kParallelThreshold)
  for (int64_t c = 0; c < chunks; ++c) {
    float buf[kChunk];
    const int64_t begin = c * kChunk, end = std::min(q.numel, begin + kChunk);
    DequantizeNf4Range(q, begin, end, buf);
    for (int64_t i = begin; i < end; ++i) out[i] = store(buf[i - begin]);
  }
}

}  // namespace

const std::array<float, 16>& Nf4Levels() {
  static const std::array<float, 16> levels = {
      -1.0f,
      -0.6961928009986877f,
      -0.5250730514526367f,
      -0.39491748809814453f,
      -0.28444138169288635f,
      -0.18477343022823334f,
      -0.09105003625154495f,
      0.0f,
      0.07958029955625534f,
      0.16093020141124725f,
      0.24611230194568634f,
      0.33791524171829224f,
      0.44070982933044434f,
      0.5626170039176941f,
      0.7229568362236023f,
      1.0f};
  return levels;
}

int64_t Nf4Bytes(int64_t n) {
  return n / 2 + n / kNf4BlockSize + 4 * (n / kNf4GroupSize) + 4;
}

absl::StatusOr<Nf4Quantized> QuantizeNf4(const float* x, int64_t n, const std::string& what) {
  Nf4Quantized q;
  q.numel = n;
  if (n > 0 && n % kNf4GroupSize == 0) {
    q.codes.resize(n / 2);
    q.quantized_scalers.resize(n / kNf4BlockSize);
    q.quantization_factor.resize(n / kNf4GroupSize);
  }
  const Nf4MutableView out{n, q.codes.data(), q.quantized_scalers.data(),
                           q.quantization_factor.data(), &q.scaler_mean};
  if (absl::Status s = QuantizeInto(x, n, what, out); !s.ok()) return s;
  return q;
}

absl::Status QuantizeNf4Into(const float* x, int64_t n, const std::string& what,
                             const Nf4MutableView& out) {
  return QuantizeInto(x, n, what, out);
}
absl::Status QuantizeNf4Into(const bf16* x, int64_t n, const std::string& what,
                             const Nf4MutableView& out) {
  return QuantizeInto(x, n, what, out);
}
absl::Status QuantizeNf4Into(const f16* x, int64_t n, const std::string& what,
                             const Nf4MutableView& out) {
  return QuantizeInto(x, n, what, out);
}

namespace nf4_internal {

Nf4Isa BestNf4Isa() {
  if (IsaSupported(IsaLevel::kAvx512)) return Nf4Isa::kAvx512;
  if (IsaSupported(IsaLevel::kAvx2)) return Nf4Isa::kAvx2;
  return Nf4Isa::kScalar;
}

void DequantizeNf4RangeWithIsa(Nf4Isa isa, const Nf4View& q, int64_t begin, int64_t end,
                               float* out) {
  switch (isa) {
    case Nf4Isa::kAvx512:
      return RangeWith<BlockAvx512>(q, begin, end, out);
    case Nf4Isa::kAvx2:
      return RangeWith<BlockAvx2>(q, begin, end, out);
    case Nf4Isa::kScalar:
      return RangeWith<BlockScalar>(q, begin, end, out);
  }
}

}  // namespace nf4_internal

void DequantizeNf4Range(const Nf4View& q, int64_t begin, int64_t end, float* out) {
  nf4_internal::DequantizeNf4RangeWithIsa(nf4_internal::BestNf4Isa(), q, begin, end, out);
}

void DequantizeNf4(const Nf4View& q, float* out) {
  DequantizeAll(q, out, [](float v) { return v; });
}

void DequantizeNf4(const Nf4View& q, bf16* out) {
  DequantizeAll(q, out, [](float v) { return FloatToBf16(v); });
}

}  // namespace cpu
}  // namespace cctune
