// Parameter counts: Llama 3.1 8B = 8,030,261,248 as published by Meta (and in the issue);
// the others from torchtune 0.6.1's builders on torch's meta device
// (python3 tools/golden/gen_torchtune_goldens.py --param-counts). 405B: 405,853,388,800.
#include "models/llama3_1/llama3_1.h"

#include "gtest/gtest.h"
#include "models/model_test_util.h"

namespace cctune {
namespace {

TEST(Llama3_1Test, Llama3_1_8B) {
  testing::ExpectModel(Llama3_1_8B(), {8030261248, 291, false, 128256, 4096, 32, 32, 8, 14336});
}

TEST(Llama3_1Test, Llama3_1_70B) {
  testing::ExpectModel(Llama3_1_70B(), {70553706496, 723, false, 128256, 8192, 80, 64, 8, 28672});
}

TEST(Llama3_1Test, Llama3_1_405BWithoutMemory) {
  testing::ExpectModel(Llama3_1_405B(),
                       {405853388800, 1137, false, 128256, 16384, 126, 128, 8, 53248});
}

TEST(Llama3_1Test, UsesScaledRopeWith131kContext) {
  auto m = Llama3_1_8B();
  ASSERT_TRUE(m.ok());
  EXPECT_EQ((*m)->max_seq_len(), 131072);
  EXPECT_EQ((*m)->layer(0).attn().max_seq_len(), 131072);
}

}  // namespace
}  // namespace cctune
