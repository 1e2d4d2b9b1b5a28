// Parameter counts: torchtune 0.6.1's builders on torch's meta device
// (python3 tools/golden/gen_torchtune_goldens.py --param-counts); Llama 3 8B is Meta's
// published 8,030,261,248.
#include "models/llama3/llama3.h"

#include "gtest/gtest.h"
#include "models/model_test_util.h"

namespace cctune {
namespace {

TEST(Llama3Test, Llama3_8B) {
  testing::ExpectModel(Llama3_8B(), {8030261248, 291, false, 128256, 4096, 32, 32, 8, 14336});
}

TEST(Llama3Test, Llama3_70B) {
  testing::ExpectModel(Llama3_70B(), {70553706496, 723, false, 128256, 8192, 80, 64, 8, 28672});
}

TEST(Llama3Test, RopeIsUnscaledBase500k) {
  auto m = Llama3_8B();
  ASSERT_TRUE(m.ok());
  EXPECT_EQ((*m)->max_seq_len(), 8192);
}

}  // namespace
}  // namespace cctune
