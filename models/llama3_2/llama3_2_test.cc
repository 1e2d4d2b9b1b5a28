// Parameter counts: Llama 3.2 1B = 1,235,814,400 (tied output) as published by Meta and in the
// issue; 3B = 3,212,749,824 from torchtune 0.6.1 on torch's meta device
// (python3 tools/golden/gen_torchtune_goldens.py --param-counts).
#include "models/llama3_2/llama3_2.h"

#include "gtest/gtest.h"
#include "models/model_test_util.h"

namespace cctune {
namespace {

TEST(Llama3_2Test, Llama3_2_1BIsTied) {
  testing::ExpectModel(Llama3_2_1B(), {1235814400, 146, true, 128256, 2048, 16, 32, 8, 8192});
}

TEST(Llama3_2Test, Llama3_2_3BIsTied) {
  testing::ExpectModel(Llama3_2_3B(), {3212749824, 254, true, 128256, 3072, 28, 24, 8, 8192});
}

TEST(Llama3_2Test, UntyingAddsTheOutputMatrix) {
  testing::ExpectModel(Llama3_2_1B(/*tie_word_embeddings=*/false),
                       {1235814400 + 128256LL * 2048, 147, false, 128256, 2048, 16, 32, 8, 8192});
}

}  // namespace
}  // namespace cctune
