#include "recipes/generate_recipe.h"

#include <string>

#include "core/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/llama2c_fixture.h"

namespace cctune {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;

// The keys of torchtune's generation.yaml and issue 5, all accepted.
TEST(GenerateRecipeSchemaTest, HasTheTorchtuneKeys) {
  const Schema& s = GenerateRecipeSchema();
  for (const char* key : {"output_dir", "model", "checkpointer", "tokenizer", "device", "dtype",
                          "seed", "prompt", "max_new_tokens", "temperature", "top_k", "top_p",
                          "enable_kv_cache", "kv_cache_layout", "quantizer"}) {
    EXPECT_NE(s.Find(key), nullptr) << key;
  }
  EXPECT_TRUE(s.CheckDefinition().ok());
}

class ValidateGenerateConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::TestTempDir("validate_generate");
    ASSERT_TRUE(testing::WriteLlama2cFixture(dir_).ok());
  }
  std::vector<std::string> Problems(const std::string& extra_yaml) {
    const std::string yaml =
        "model: {_component_: cctune.models.llama2c.llama2c}\n"
        "checkpointer:\n  _component_: cctune.training.Llama2cCheckpointer\n"
        "  checkpoint_dir: " +
        dir_ +
        "\n  checkpoint_files: [model.bin]\n"
        "tokenizer:\n  _component_: cctune.models.llama2c.llama2c_tokenizer\n"
        "  path: " +
        dir_ +
        "/tok.bin\n"
        "prompt: {user: hi}\nmax_new_tokens: 4\n" +
        extra_yaml;
    Config cfg = ValueOrDie(Config::FromString(yaml, "gen.yaml"));
    std::vector<std::string> out;
    for (const ConfigError& e : ValidateGenerateConfig(cfg)) out.push_back(e.ToString());
    return out;
  }
  std::string dir_;
};

TEST_F(ValidateGenerateConfigTest, ValidConfig) { EXPECT_THAT(Problems(""), IsEmpty()); }

TEST_F(ValidateGenerateConfigTest, ValueChecks) {
  auto p = Problems(
      "quantizer: {group_size: 32}\ntop_p: 1.5\ntemperature: -1\ntop_k: 0\n"
      "dtype: fp16\ndevice: gpu\nkv_cache_layout: paged\n");
  ASSERT_EQ(p.size(), 7u) << ::testing::PrintToString(p);
  const std::string all = ::testing::PrintToString(p);
  EXPECT_THAT(all, HasSubstr("key 'quantizer': missing _component_"));
  EXPECT_THAT(all, HasSubstr("key 'top_p': must be in (0, 1]"));
  EXPECT_THAT(all, HasSubstr("key 'temperature': must be >= 0"));
  EXPECT_THAT(all, HasSubstr("key 'top_k': must be in [1, 2147483647], got 0"));
  EXPECT_THAT(all, HasSubstr("key 'dtype'"));
  EXPECT_THAT(all, HasSubstr("key 'device'"));
  EXPECT_THAT(all, HasSubstr("key 'kv_cache_layout'"));
}

TEST_F(ValidateGenerateConfigTest, MissingPieces) {
  Config cfg = ValueOrDie(Config::FromString("prompt: {system: be brief}\n", "gen.yaml"));
  std::vector<ConfigError> errors = ValidateGenerateConfig(cfg);
  std::string all;
  for (const ConfigError& e : errors) all += e.ToString() + "\n";
  for (const char* key :
       {"'model'", "'checkpointer'", "'tokenizer'", "'max_new_tokens'", "'prompt.user'"}) {
    EXPECT_THAT(all, HasSubstr(key)) << all;
  }
}

TEST(GenerateMainTest, Usage) {
  EXPECT_EQ(RecipeMain(GenerateRecipe(), {}), 2);
  EXPECT_EQ(RecipeMain(GenerateRecipe(), {"--config"}), 2);
  EXPECT_EQ(RecipeMain(GenerateRecipe(), {"--help"}), 0);
  EXPECT_EQ(RecipeMain(GenerateRecipe(), {"--config", "/no/such.yaml"}), 1);
}

}  // namespace
}  // namespace cctune
