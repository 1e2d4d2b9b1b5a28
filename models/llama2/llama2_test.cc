// Parameter counts: torchtune 0.6.1's builders built on torch's meta device
// (python3 tools/golden/gen_torchtune_goldens.py --param-counts). Llama 2 7B also matches
// Meta's release (6,738,415,616 parameters, the HF checkpoint's total_size / 2 bytes).
#include "models/llama2/llama2.h"

#include "gtest/gtest.h"
#include "models/decoder_builder.h"
#include "models/model_test_util.h"

namespace cctune {
namespace {

TEST(Llama2Test, Llama2_7B) {
  testing::ExpectModel(Llama2_7B(), {6738415616, 291, false, 32000, 4096, 32, 32, 32, 11008});
}

TEST(Llama2Test, Llama2_13B) {
  testing::ExpectModel(Llama2_13B(), {13015864320, 363, false, 32000, 5120, 40, 40, 40, 13824});
}

TEST(Llama2Test, Llama2_70B) {
  testing::ExpectModel(Llama2_70B(), {68976648192, 723, false, 32000, 8192, 80, 64, 8, 28672});
}

TEST(Llama2Test, DefaultHiddenDimIsScaledForSwiGlu) {
  EXPECT_EQ(ScaleHiddenDimForMlp(4096), 11008);
  EXPECT_EQ(ScaleHiddenDimForMlp(5120), 13824);
  EXPECT_EQ(ScaleHiddenDimForMlp(288, 32), 768);  // llama2.c's stories15M
  auto m = testing::BuildModelYaml(
      "_component_: torchtune.models.llama2.llama2\nvocab_size: 100\nnum_layers: 1\n"
      "num_heads: 4\nnum_kv_heads: 4\nembed_dim: 64\nmax_seq_len: 128\n");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->layer(0).mlp().hidden_dim(), ScaleHiddenDimForMlp(64));
}

}  // namespace
}  // namespace cctune
