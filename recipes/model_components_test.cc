#include "recipes/model_components.h"

#include "config/config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cctune {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<std::unique_ptr<TransformerDecoder>> Build(const std::string& yaml,
                                                          const ModelArgs& from_checkpoint = {}) {
  CCTUNE_CHECK_OK(RegisterModelComponents());
  absl::StatusOr<Config> cfg = Config::FromString(yaml, "test.yaml");
  CCTUNE_CHECK_OK(cfg);
  return ModelComponentRegistry().InstantiateKey(cfg->root(), "model", from_checkpoint);
}

TEST(ModelComponentsTest, EveryModelBuilderIsAComponent) {
  ASSERT_TRUE(RegisterModelComponents().ok());
  ASSERT_TRUE(RegisterModelComponents().ok());  // idempotent
  for (const std::string& name : ModelRegistry::Global().Names()) {
    EXPECT_TRUE(ModelComponentRegistry().Contains(name)) << name;
  }
  EXPECT_TRUE(ModelComponentRegistry().Contains("torchtune.models.llama3_2.llama3_2_1b"));
}

TEST(ModelComponentsTest, KeysAreBuilderArguments) {
  auto m = Build(
      "model:\n  _component_: torchtune.models.tiny.tiny_llama\n  num_layers: 3\n"
      "  embed_dim: 32\n  num_kv_heads: 4\n  tie_word_embeddings: True\n");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->num_layers(), 3u);
  EXPECT_EQ((*m)->embed_dim(), 32);
  EXPECT_EQ((*m)->layer(0).attn().num_kv_heads(), 4);
}

TEST(ModelComponentsTest, CheckpointArgumentsFillMissingKeys) {
  const ModelArgs header = {{"dim", "64"},      {"hidden_dim", "172"}, {"n_layers", "5"},
                            {"n_heads", "8"},   {"n_kv_heads", "4"},   {"vocab_size", "512"},
                            {"seq_len", "512"}, {"not_an_arg", "1"}};
  auto m = Build("model:\n  _component_: cctune.models.llama2c.llama2c\n", header);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->num_layers(), 5u);
  EXPECT_EQ((*m)->vocab_size(), 512);
  // An explicit key wins over the checkpoint's.
  m = Build("model:\n  _component_: cctune.models.llama2c.llama2c\n  seq_len: 128\n", header);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->max_seq_len(), 128);
  // Without the checkpoint the builder reports the missing arguments.
  m = Build("model:\n  _component_: cctune.models.llama2c.llama2c\n");
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("dim"));
}

TEST(ModelComponentsTest, Errors) {
  auto m = Build("model:\n  _component_: cctune.models.tiny.tiny_llama\n  num_layer: 3\n");
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(std::string(m.status().message()),
              HasSubstr("test.yaml:3: key 'model.num_layer': unknown key"));
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("num_layers"));
  m = Build("model:\n  _component_: cctune.models.tiny.tiny_llama\n  num_layers: [1, 2]\n");
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("scalars"));
  m = Build("model:\n  _component_: cctune.models.tiny.tiny_llama\n  num_layers: abc\n");
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("abc"));
  m = Build("model:\n  _component_: cctune.models.llama9.llama9_1b\n");
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("llama9_1b"));
}

}  // namespace
}  // namespace cctune
