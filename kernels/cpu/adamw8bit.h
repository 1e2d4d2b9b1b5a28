// Block-wise 8-bit AdamW (the algorithm of bitsandbytes' AdamW8bit, "8-bit Optimizers via
// Block-wise Quantization", Dettmers et al. 2022), CPU. The two moments are stored as one
// byte per element: an index into a 256-entry dynamic (tree) quantization map, scaled by the
// absolute maximum of its block of kAdamW8bitBlock elements (one f32 per block and moment).
//
// One update of a block:
//   m, v   = map_signed[m_q] * m_absmax,  map_unsigned[v_q] * v_absmax      (dequantize)
//   m      = beta1 * m + (1 - beta1) * g;  v = beta2 * v + (1 - beta2) * g^2
//   p      = p * (1 - lr * wd) - lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps)   (the new f32
//            moments, before they are requantized, as bitsandbytes does)
//   m_absmax, v_absmax = max |m|, max v over the block
//   m_q, v_q = the nearest map entries to m / m_absmax, v / v_absmax (ties: the lower entry;
//            a block whose absmax is 0 stores the map's 0)
// Blocks are independent, so the result does not depend on the thread count.
#ifndef CCTUNE_KERNELS_CPU_ADAMW8BIT_H_
#define CCTUNE_KERNELS_CPU_ADAMW8BIT_H_

#include <array>
#include <cstdint>

#include "core/dtype.h"

namespace cctune {
namespace cpu {

inline constexpr int64_t kAdamW8bitBlock = 256;

// The dynamic quantization maps of bitsandbytes' create_dynamic_map (7 exponent bits, 8
// total), sorted ascending. Signed (for the first moment): 0, ±1 and 127 values of each
// sign spread over [1e-6, 1) by decade, with finer steps in the higher decades. Unsigned
// (for the second moment): 0, 1 and 254 positive values, the same decades with twice the
// steps each.
const std::array<float, 256>& DynamicQuantMapSigned();
const std::array<float, 256>& DynamicQuantMapUnsigned();

// The index of the entry of the sorted `map` nearest to x (ties: the lower index).
uint8_t QuantizeNearest(const std::array<float, 256>& map, float x);

struct AdamW8bitScalars {
  float beta1, beta2, eps;
  float w1, w2;     // 1 - beta1, 1 - beta2 (rounded from double, not 1 - the f32 betas)
  float decay;      // 1 - lr * weight_decay
  float step_size;  // lr / (1 - beta1^t)
  float bc2_sqrt;   // sqrt(1 - beta2^t)
};

// Updates the n elements of p (f32: the parameter or its master copy), writing the bf16
// rounding of the result to out when out is not null; m_q / v_q hold n codes and
// m_absmax / v_absmax ceil(n / kAdamW8bitBlock) scales. Blocks run on all cores when n is
// large.
void AdamW8bitUpdate(float* p, bf16* out, const float* g, uint8_t* m_q, float* m_absmax,
                     uint8_t* v_q, float* v_absmax, int64_t n, const AdamW8bitScalars& s);

}  // namespace cpu
}  // namespace cctune

#endif  // CCTUNE_KERNELS_CPU_ADAMW8BIT_H_
