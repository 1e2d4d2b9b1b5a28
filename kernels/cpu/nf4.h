// NF4 (4-bit NormalFloat, QLoRA) block quantization with double-quantized scales, in the
// layout of torchao's NF4Tensor (torchtune's to_nf4, block_size 64, scaler_block_size 256):
//   - each block of 64 elements is divided by its absmax and each value replaced by the index
//     of the nearest of the 16 NF4 levels (ties: the lower index); two indices per byte, the
//     first element of each pair in the high nibble;
//   - the per-block absmax scales are double-quantized: their mean over the whole tensor is
//     subtracted, then each group of 256 is scaled by 256 / (2 · its absmax) and rounded to
//     int8 (clamped to [-128, 127]); one f32 factor per group and the f32 mean are kept;
//   - dequantization: level[code] · (q_scale / factor + mean).
// The quantization divides by the exact block absmax (not the double-quantized one), as
// torchao does. torchao computes in the weight's dtype (bf16); here f32, so a value on a
// boundary between two levels may round to the other one.
// Storage: n/2 code bytes + n/64 int8 scales + n/16384 f32 factors + one f32: about 4.13 bits
// per element.
//
// DequantizeNf4Range is the building block of the NF4 linear (kernels/cpu/nf4_linear.h): any
// element range, whole blocks through a 16-level table lookup in registers (AVX-512:
// vpermps over the 16 levels; AVX2: two 8-entry vpermps and a blend), chosen at run time
// (kernels/cpu/isa.h); every path computes level · scale in f32, so all are bit-identical.
#ifndef CCTUNE_KERNELS_CPU_NF4_H_
#define CCTUNE_KERNELS_CPU_NF4_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/dtype.h"

namespace cctune {
namespace cpu {

inline constexpr int64_t kNf4BlockSize = 64;
inline constexpr int64_t kNf4ScalerBlockSize = 256;
// torchao's divisibility: a tensor is a whole number of scaler groups.
inline constexpr int64_t kNf4GroupSize = kNf4BlockSize * kNf4ScalerBlockSize;

// torchao's 16 NF4 levels (bitsandbytes' table, as f32), ascending, from -1 to 1.
const std::array<float, 16>& Nf4Levels();

// Read-only view of an NF4 tensor's four parts (numel elements).
struct Nf4View {
  int64_t numel = 0;
  const uint8_t* codes = nullptr;             // numel / 2
  const int8_t* quantized_scalers = nullptr;  // numel / 64
  const float* quantization_factor = nullptr;  // numel / 16384
  float scaler_mean = 0;
};

// Where QuantizeNf4Into writes (the same sizes).
struct Nf4MutableView {
  int64_t numel = 0;
  uint8_t* codes = nullptr;
  int8_t* quantized_scalers = nullptr;
  float* quantization_factor = nullptr;
  float* scaler_mean = nullptr;
};

struct Nf4Quantized {
  int64_t numel = 0;
  std::vector<uint8_t> codes;             // numel / 2
  std::vector<int8_t> quantized_scalers;  // numel / 64
  std::vector<float> quantization_factor;  // numel / (64 * 256)
  float scaler_mean = 0;

  Nf4View view() const {
    return {numel, codes.data(), quantized_scalers.data(), quantization_factor.data(),
            scaler_mean};
  }
};

// Bytes of an NF4 tensor of n elements: codes, int8 scales, f32 factors and the f32 mean.
int64_t Nf4Bytes(int64_t n);

// InvalidArgument (naming `what` and the sizes) unless n is a positive multiple of
// kNf4GroupSize (torchao asserts the same divisibility) and x is finite. The input is read
// once per pass in its own dtype (no f32 copy of it is made).
absl::StatusOr<Nf4Quantized> QuantizeNf4(const float* x, int64_t n, const std::string& what);
// The same into `out` (out.numel must be n), from f32, bf16 or f16 values.
absl::Status QuantizeNf4Into(const float* x, int64_t n, const std::string& what,
                             const Nf4MutableView& out);
absl::Status QuantizeNf4Into(const bf16* x, int64_t n, const std::string& what,
                             const Nf4MutableView& out);
absl::Status QuantizeNf4Into(const f16* x, int64_t n, const std::string& what,
                             const Nf4MutableView& out);

// out[0, end - begin) = the dequantized elements [begin, end) of q, at the active ISA level,
// on the calling thread. 0 <= begin <= end <= q.numel.
void DequantizeNf4Range(const Nf4View& q, int64_t begin, int64_t end, float* out);

// The dequantized values of q into out[0, q.numel) (f32 or bf16-rounded), on all cores for
// large tensors.
void DequantizeNf4(const Nf4View& q, float* out);
void DequantizeNf4(const Nf4View& q, bf16* out);
inline void DequantizeNf4(const Nf4Quantized& q, float* out) { DequantizeNf4(q.view(), out); }
inline void DequantizeNf4(const Nf4Quantized& q, bf16* out) { DequantizeNf4(q.view(), out); }

namespace nf4_internal {
// DequantizeNf4Range with the path forced (kScalar, kAvx2 or kAvx512; the caller checks
// IsaSupported). For tests.
enum class Nf4Isa { kScalar, kAvx2, kAvx512 };
void DequantizeNf4RangeWithIsa(Nf4Isa isa, const Nf4View& q, int64_t begin, int64_t end,
                               float* out);
Nf4Isa BestNf4Isa();
}  // namespace nf4_internal

}  // namespace cpu
}  // namespace cctune

#endif  // CCTUNE_KERNELS_CPU_NF4_H_
