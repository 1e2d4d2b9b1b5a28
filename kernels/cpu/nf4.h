// NF4 (4-bit NormalFloat, QLoRA) block quantization with double-quantized scales, in the
// layout of torchao's NF4Tensor (torchtune's to_nf4, block_size 64, scaler_block_size 256):
//   - each block of 64 elements is divided by its absmax and each value replaced by the index
//     of the nearest of the 16 NF4 levels (ties: the lower index); two indices per byte, the
//     first element of each pair in the high nibble;
//   - the per-block absmax scales are double-quantized: their mean over the whole tensor is
//     subtracted, then each group of 256 is scaled by 128 / (its absmax) and rounded to int8
//     (clamped to [-128, 127]); one f32 factor per group and the f32 mean are kept;
//   - dequantization: level[code] * (q_scale / factor + mean).
// The quantization divides by the exact block absmax (not the double-quantized one), as
// torchao does. torchao computes in the weight's dtype (bf16); here f32, so a value on a
// boundary between two levels may round to the other one.
// Storage: n/2 code bytes + n/64 int8 scales + n/16384 f32 factors + one f32: about 4.13 bits
// per element.
#ifndef CCTUNE_KERNELS_CPU_NF4_H_
#define CCTUNE_KERNELS_CPU_NF4_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/dtype.h"

namespace cctune {
namespace cpu {

inline constexpr int64_t kNf4BlockSize = 64;
inline constexpr int64_t kNf4ScalerBlockSize = 256;

// torchao's 16 NF4 levels (4 decimals), ascending, from -1 to 1.
const std::array<float, 16>& Nf4Levels();

struct Nf4Quantized {
  int64_t numel = 0;
  std::vector<uint8_t> codes;             // numel / 2
  std::vector<int8_t> quantized_scalers;  // numel / 64
  std::vector<float> quantization_factor;  // numel / (64 * 256)
  float scaler_mean = 0;
};

// InvalidArgument (naming `what` and the sizes) unless n is a multiple of 64 * 256 = 16384
// (torchao asserts the same divisibility) and x is finite.
absl::StatusOr<Nf4Quantized> QuantizeNf4(const float* x, int64_t n, const std::string& what);

// The dequantized values of q into out[0, q.numel) (f32 or bf16-rounded), on all cores for
// large tensors.
void DequantizeNf4(const Nf4Quantized& q, float* out);
void DequantizeNf4(const Nf4Quantized& q, bf16* out);

}  // namespace cpu
}  // namespace cctune

#endif  // CCTUNE_KERNELS_CPU_NF4_H_
