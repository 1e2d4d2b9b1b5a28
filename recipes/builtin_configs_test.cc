#include "recipes/builtin_configs.h"

#include <fstream>
#include <sstream>

#include "core/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/llama2c_fixture.h"
#include "tests/subprocess.h"

namespace cctune {
namespace {

using ::testing::HasSubstr;

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(BuiltinConfigsTest, EmbeddedCopiesEqualTheFiles) {
  std::vector<EmbeddedConfig> configs = BuiltinConfigs();
  ASSERT_EQ(configs.size(), 18u);
  for (size_t i = 1; i < configs.size(); ++i) {
    EXPECT_LT(std::string(configs[i - 1].name), std::string(configs[i].name));
  }
  for (const EmbeddedConfig& c : configs) {
    EXPECT_EQ(std::string(c.source), "configs/" + std::string(c.name) + ".yaml");
    EXPECT_EQ(std::string(c.yaml), ReadFile(testing::RunfilePath(c.source))) << c.name;
    EXPECT_TRUE(Config::FromString(c.yaml, c.source).ok()) << c.name;
  }
}

TEST(BuiltinConfigsTest, NameSpellings) {
  const EmbeddedConfig* a = FindBuiltinConfig("llama2c/generation");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(FindBuiltinConfig("llama2c/generation.yaml"), a);
  EXPECT_EQ(FindBuiltinConfig("configs/llama2c/generation.yaml"), a);
  EXPECT_EQ(FindBuiltinConfig("llama2c"), nullptr);
  EXPECT_EQ(FindBuiltinConfig("generation"), nullptr);
}

TEST(BuiltinConfigsTest, LoadRecipeConfig) {
  // Built-in, with an override applied before interpolation.
  Config c = ValueOrDie(LoadRecipeConfig("llama2c/generation", {"shared_dir=/data"}));
  EXPECT_EQ(ValueOrDie(c.GetString("tokenizer.path")), "/data/models/stories260K/tok512.bin");
  // A file wins over a built-in name; errors name the file.
  const std::string dir = testing::TestTempDir("builtin_configs");
  const std::string path = dir + "/c.yaml";
  std::ofstream(path) << "a: 1\nb: ${a}\n";
  c = ValueOrDie(LoadRecipeConfig(path, {"a=5"}));
  EXPECT_EQ(ValueOrDie(c.GetInt("b")), 5);
  EXPECT_EQ(c.path(), path);
  // Unresolved: cycles are left for Validate to report.
  std::ofstream(path) << "a: ${b}\nb: ${a}\n";
  EXPECT_TRUE(LoadUnresolvedRecipeConfig(path, {}).ok());
  auto bad = LoadRecipeConfig(path, {});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("cycle"));
  auto missing = LoadRecipeConfig("llama2c/nope", {});
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.status().message()),
              HasSubstr("neither a file nor a built-in config"));
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("llama3_2/1B_generation"));
}

}  // namespace
}  // namespace cctune
