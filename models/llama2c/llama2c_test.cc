#include "models/llama2c/llama2c.h"

#include <string>

#include "gtest/gtest.h"
#include "models/model_test_util.h"

namespace cctune {
namespace {

// stories260K's header (../shared/README.md): dim 64, hidden 172, 5 layers, 8/4 heads,
// vocab 512 (shared classifier), seq_len 512. Its 1,056,540-byte file is the 28-byte header,
// then the float32 weights (260,032 parameters) and llama2.c's two legacy RoPE tables
// (seq_len x head_dim/2 floats each), which checks the count against a real checkpoint.
TEST(Llama2cTest, Stories260KArchitecture) {
  const Llama2cConfig header{64, 172, 5, 8, 4, 512, 512};
  // Per layer: q 64*64, k/v 64*32 each, o 64*64, w1/w2/w3 172*64 each, 2 norms of 64.
  const int64_t per_layer = 64 * 64 * 2 + 64 * 32 * 2 + 172 * 64 * 3 + 64 * 2;
  const int64_t params = 512 * 64 + 5 * per_layer + 64;
  testing::ExpectModel(Llama2c(header), {params, 2 + 5 * 9, true, 512, 64, 5, 8, 4, 172});
  // The checkpoint file is the header, the weights and two RoPE tables of seq_len x h_d/2.
  EXPECT_EQ(28 + 4 * (params + 2 * 512 * (8 / 2)), 1056540);
}

TEST(Llama2cTest, NegativeVocabMeansAnUnsharedClassifier) {
  const Llama2cConfig header{64, 172, 5, 8, 4, -512, 512};
  auto m = Llama2c(header);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ((*m)->vocab_size(), 512);
  const int64_t per_layer = 64 * 64 * 2 + 64 * 32 * 2 + 172 * 64 * 3 + 64 * 2;
  testing::ExpectModel(Llama2c(header), {2 * 512 * 64 + 5 * per_layer + 64, 3 + 5 * 9, false, 512,
                                         64, 5, 8, 4, 172});
}

TEST(Llama2cTest, BadHeadersNameTheField) {
  auto r = Llama2c({64, 172, 5, 8, 3, 512, 512});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(
      std::string(r.status().message()).find("n_heads (8) must be divisible by n_kv_heads (3)"),
      std::string::npos);
  r = Llama2c({64, 172, 0, 8, 4, 512, 512});
  EXPECT_NE(std::string(r.status().message()).find("n_layers (0)"), std::string::npos);
  r = Llama2c({60, 172, 1, 8, 4, 512, 512});
  EXPECT_NE(std::string(r.status().message()).find("dim (60)"), std::string::npos);
}

}  // namespace
}  // namespace cctune
