// Test helper: small randomly-initialised Llama-style models whose logits are far from flat
// (weights ~ N(0, 1/fan_in), norm scales near 1), so greedy decoding has no near-ties and
// sampling has a real distribution to draw from.
#ifndef CCTUNE_GENERATION_TEST_MODELS_H_
#define CCTUNE_GENERATION_TEST_MODELS_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "generation/model_loader.h"

namespace cctune {
namespace testing {

struct RandomModelSpec {
  int64_t vocab_size = 97;  // odd on purpose
  int64_t num_layers = 2;
  int64_t num_heads = 8;
  int64_t num_kv_heads = 2;
  int64_t embed_dim = 48;  // head_dim 6
  int64_t intermediate_dim = 80;
  int64_t max_seq_len = 128;
  bool tie_word_embeddings = false;
  DType dtype = DType::kF32;
  uint64_t seed = 7;
};

absl::StatusOr<LoadedModel> RandomModel(const RandomModelSpec& spec);

}  // namespace testing
}  // namespace cctune

#endif  // CCTUNE_GENERATION_TEST_MODELS_H_
