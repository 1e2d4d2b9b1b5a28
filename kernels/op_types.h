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

}  // namespace ops
}  // namespace cctune

#endif  // CCTUNE_KERNELS_OP_TYPES_H_
