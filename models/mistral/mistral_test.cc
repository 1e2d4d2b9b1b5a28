// Mistral 7B: 7,241,732,096 parameters, from torchtune 0.6.1 on torch's meta device
// (python3 tools/golden/gen_torchtune_goldens.py --param-counts); Mistral AI publishes 7.24B.
#include "models/mistral/mistral.h"

#include "gtest/gtest.h"
#include "models/model_test_util.h"

namespace cctune {
namespace {

TEST(MistralTest, Mistral_7B) {
  testing::ExpectModel(Mistral_7B(), {7241732096, 291, false, 32000, 4096, 32, 32, 8, 14336});
}

TEST(MistralTest, ComponentBuilderValidates) {
  auto bad = testing::BuildModelYaml(
      "_component_: torchtune.models.mistral.mistral\nvocab_size: 32000\nnum_layers: 2\n"
      "num_heads: 32\nnum_kv_heads: 6\nembed_dim: 4096\nintermediate_dim: 14336\n"
      "max_seq_len: 1024\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message())
                .find("num_heads (32) must be divisible by "
                      "num_kv_heads (6)"),
            std::string::npos);
}

}  // namespace
}  // namespace cctune
