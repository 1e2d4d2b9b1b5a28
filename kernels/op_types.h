// Plain option types shared by the op API (ops.h) and the device backends (backend.h).
#ifndef CCTUNE_KERNELS_OP_TYPES_H_
#define CCTUNE_KERNELS_OP_TYPES_H_

#include <cstdint>

#include "core/tensor.h"

namespace cctune {
namespace ops {

// How RoPE pairs the features of a head: (2i, 2i+1) as Meta's and llama2.c's checkpoints do,
// or (i, i + h_d/2) as Hugging Face's do.
enum class RopePairing { kInterleaved, kHalfSplit };

// Llama 3.1 frequency scaling (torchtune's Llama3ScaledRoPE).
struct RopeScaling {
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

struct AttentionOptions {
  // Optional bool mask [b, s_q, s_kv]: true means "may attend" (torchtune's convention).
  const Tensor* mask = nullptr;
  // Causal: query i (at absolute position s_kv - s_q + i) attends keys j <= that position.
  bool causal = false;
  // Score scale; 0 means 1/sqrt(h_d).
  float scale = 0.f;
};

// The target value that CrossEntropy skips (PyTorch's and torchtune's default ignore_index).
constexpr int64_t kIgnoreIndex = -100;

struct SamplingParams {
  float temperature = 1.0f;  // 0: greedy (argmax)
  int64_t top_k = 0;         // 0: no top-k filter
  float top_p = 1.0f;        // 1: no nucleus filter
};

// ---- Optimizer updates (ops::AdamWUpdate, ops::SgdUpdate) ----

// One torch.optim.AdamW update (decoupled weight decay, bias correction, amsgrad=False).
struct AdamWStep {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
  int64_t step = 1;  // 1-based index of this update, for the bias corrections
};

// The f32 scalars of one AdamW update. ops::AdamWUpdate derives them from AdamWStep in double
// (as torch does with Python floats), so every backend runs on the same bits:
//   m = lerp(m, g, w1);  v = v * beta2 + w2 * g²;  denom = sqrt(v) / bc2_sqrt + eps;
//   p = p * decay - step_size * (m / denom).
// lerp_low picks torch's lerp formula by the weight: m + w1 (g - m) when w1 < 0.5, else
// g - (g - m)(1 - w1).
struct AdamWScalars {
  float decay = 1.f, step_size = 0.f, bc2_sqrt = 1.f, w1 = 0.f, beta2 = 0.f, w2 = 0.f, eps = 0.f;
  bool lerp_low = true;
};

// One torch.optim.SGD update (momentum, dampening, nesterov, L2 weight decay).
struct SgdStep {
  double lr = 1e-3;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
  bool first = false;  // the first update: torch starts the momentum buffer as a copy of d_p
};

// The f32 scalars of one SGD update, derived from SgdStep by ops::SgdUpdate:
//   d = decay ? fma(p, wd, g) : g;
//   momentum: buf = first ? d : fma(d, keep, buf * mu);  d = nesterov ? fma(buf, mu, d) : buf;
//   p = fma(d, -lr, p).
struct SgdScalars {
  float lr = 0.f, wd = 0.f, mu = 0.f, keep = 1.f;
  bool decay = false, momentum = false, first = false, nesterov = false;
};

}  // namespace ops
}  // namespace cctune

#endif  // CCTUNE_KERNELS_OP_TYPES_H_
