// Test-only checks shared by the model-builder tests: build on the meta device and compare the
// parameter count, the state-dict size and a few names and shapes with torchtune's.
#ifndef CCTUNE_MODELS_MODEL_TEST_UTIL_H_
#define CCTUNE_MODELS_MODEL_TEST_UTIL_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "modules/transformer_decoder.h"

namespace cctune {
namespace testing {

struct ExpectedModel {
  int64_t num_parameters = 0;
  size_t num_tensors = 0;  // torchtune state-dict entries
  bool tied = false;       // no output.weight
  int64_t vocab_size = 0;
  int64_t embed_dim = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t intermediate_dim = 0;
  bool qkv_bias = false;
};

// Builds `model` into a bf16 arena on the meta device (asserting that no CPU memory is taken)
// and checks it against `want` with gtest expectations.
void ExpectModel(absl::StatusOr<std::unique_ptr<TransformerDecoder>> model,
                 const ExpectedModel& want);

// Builds the model component a config's `model:` node describes, e.g.
// BuildModelYaml("_component_: torchtune.models.llama2.llama2\nvocab_size: 100\n...").
// Errors carry "test.yaml:<line>".
absl::StatusOr<std::unique_ptr<TransformerDecoder>> BuildModelYaml(const std::string& body);

}  // namespace testing
}  // namespace cctune

#endif  // CCTUNE_MODELS_MODEL_TEST_UTIL_H_
