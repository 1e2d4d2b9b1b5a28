// Qwen 2.5 parameter counts from torchtune 0.6.1's builders on torch's meta device
// (python3 tools/golden/gen_torchtune_goldens.py --param-counts); 0.5B = 494,032,768 and
// 7B = 7,615,616,512 also match Qwen's model cards (0.49B, 7.61B).
#include "models/qwen2_5/qwen2_5.h"

#include "gtest/gtest.h"
#include "models/model_test_util.h"

namespace cctune {
namespace {

TEST(Qwen2_5Test, Qwen2_5_0_5B) {
  testing::ExpectModel(Qwen2_5_0_5B(), {494032768, 290, true, 151936, 896, 24, 14, 2, 4864, true});
}

TEST(Qwen2_5Test, Qwen2_5_1_5B) {
  testing::ExpectModel(Qwen2_5_1_5B_Base(),
                       {1543714304, 338, true, 151936, 1536, 28, 12, 2, 8960, true});
  testing::ExpectModel(Qwen2_5_1_5B_Instruct(),
                       {1543714304, 338, true, 151936, 1536, 28, 12, 2, 8960, true});
}

TEST(Qwen2_5Test, Qwen2_5_3B) {
  testing::ExpectModel(Qwen2_5_3B(), {3085938688, 434, true, 151936, 2048, 36, 16, 2, 11008, true});
}

TEST(Qwen2_5Test, Qwen2_5_7BIsUntied) {
  testing::ExpectModel(Qwen2_5_7B_Base(),
                       {7615616512, 339, false, 152064, 3584, 28, 28, 4, 18944, true});
  testing::ExpectModel(Qwen2_5_7B_Instruct(),
                       {7615616512, 339, false, 152064, 3584, 28, 28, 4, 18944, true});
}

TEST(Qwen2_5Test, InstructAndBaseDifferInContext) {
  EXPECT_EQ((*Qwen2_5_1_5B_Base())->max_seq_len(), 131072);
  EXPECT_EQ((*Qwen2_5_1_5B_Instruct())->max_seq_len(), 32768);
}

}  // namespace
}  // namespace cctune
