#include "models/decoder_builder.h"

#include <cstdint>
#include <limits>
#include <string>

#include "core/random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "modules/parameters.h"

namespace cctune {
namespace {

using ::testing::HasSubstr;

DecoderConfig Small() {
  DecoderConfig c;
  c.vocab_size = 40;
  c.num_layers = 3;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.embed_dim = 16;
  c.intermediate_dim = 24;
  c.max_seq_len = 32;
  return c;
}

TEST(DecoderBuilderTest, WiresTheConfiguredModules) {
  DecoderConfig c = Small();
  c.qkv_bias = true;
  c.head_dim = 8;  // explicit, != embed_dim / num_heads
  auto m = BuildDecoder(c);
  ASSERT_TRUE(m.ok()) << m.status();
  const TransformerDecoder& d = **m;
  EXPECT_EQ(d.num_layers(), 3u);
  EXPECT_EQ(d.layer(2).attn().head_dim(), 8);
  EXPECT_EQ(d.layer(0).attn().q_proj().out_dim(), 32);
  EXPECT_TRUE(d.layer(0).attn().k_proj().has_bias());
  EXPECT_FALSE(d.layer(0).attn().output_proj().has_bias());
  EXPECT_EQ(d.layer(1).mlp().hidden_dim(), 24);
  EXPECT_EQ(d.vocab_size(), 40);
  const int64_t per_layer = 16 * 32 + 32 + 2 * (16 * 16 + 16) + 32 * 16 + 3 * 16 * 24 + 2 * 16;
  EXPECT_EQ(d.NumParameters(), 2 * 40 * 16 + 3 * per_layer + 16);
}

TEST(DecoderBuilderTest, TiedDecoderRunsAndSharesTheTable) {
  DecoderConfig c = Small();
  c.tie_word_embeddings = true;
  auto m = ValueOrDie(BuildDecoder(c));
  auto arena = ValueOrDie(ParameterArena::Create(*m, DType::kF32, Device::Cpu()));
  EXPECT_FALSE(arena.Get("output.weight").ok());
  Generator gen(3);
  ASSERT_TRUE(arena.InitializeRandom(gen).ok());
  Tensor tokens = ValueOrDie(Tensor::FromVector(std::vector<int64_t>{0, 39, 7}, {1, 3}));
  Tensor logits = ValueOrDie((*m)(tokens));
  EXPECT_EQ(logits.shape(), (Shape{1, 3, 40}));
}

TEST(DecoderBuilderTest, ScaleHiddenDimForMlpIsTorchtunes) {
  EXPECT_EQ(ScaleHiddenDimForMlp(4096), 11008);
  EXPECT_EQ(ScaleHiddenDimForMlp(5120), 13824);
  EXPECT_EQ(ScaleHiddenDimForMlp(288, 32), 768);  // llama2.c's stories15M
}

TEST(DecoderBuilderTest, ErrorsNameTheField) {
  DecoderConfig c = Small();
  c.num_kv_heads = 3;
  EXPECT_THAT(std::string(BuildDecoder(c).status().message()),
              HasSubstr("num_heads (4) must be divisible by num_kv_heads (3)"));
  c = Small();
  c.embed_dim = 18;
  EXPECT_THAT(std::string(BuildDecoder(c).status().message()),
              HasSubstr("embed_dim (18) must be divisible by num_heads (4)"));
  c = Small();
  c.intermediate_dim = 0;
  EXPECT_THAT(std::string(BuildDecoder(c).status().message()),
              HasSubstr("intermediate_dim (0) must be positive"));
  c = Small();
  c.head_dim = 5;
  EXPECT_THAT(std::string(BuildDecoder(c).status().message()),
              HasSubstr("head_dim (5) must be positive and even"));
  c = Small();
  c.num_kv_heads = 0;  // defaults to num_heads
  auto m = BuildDecoder(c);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ((*m)->layer(0).attn().num_kv_heads(), 4);
  EXPECT_THAT(DecoderConfigString(Small()), HasSubstr("num_kv_heads=2"));
}

TEST(DecoderBuilderTest, HugeSizesAreErrorsNotCrashesOrHangs) {
  DecoderConfig c = Small();
  c.max_seq_len = std::numeric_limits<int64_t>::max();  // used to overflow the RoPE table size
  EXPECT_THAT(std::string(BuildDecoder(c).status().message()),
              HasSubstr("max_seq_len (9223372036854775807) must be at most 16777216"));
  c = Small();
  c.num_layers = 1000000000;  // used to build layer after layer for minutes
  EXPECT_THAT(std::string(BuildDecoder(c).status().message()),
              HasSubstr("num_layers (1000000000) must be at most 4096"));
  c = Small();
  c.vocab_size = int64_t{1} << 40;
  EXPECT_FALSE(BuildDecoder(c).ok());
  c = Small();
  c.head_dim = std::numeric_limits<int64_t>::max() - 1;
  EXPECT_FALSE(BuildDecoder(c).ok());
}

}  // namespace
}  // namespace cctune
