#include "recipes/cli.h"

#include <set>
#include <string>

#include "gtest/gtest.h"
#include "recipes/builtin_configs.h"

namespace cctune {
namespace {

// Every config a recipe lists is built in, and every built-in config belongs to a recipe.
TEST(CliTest, RecipesAndBuiltinConfigsAgree) {
  std::set<std::string> listed;
  for (const RecipeInfo& r : Recipes()) {
    EXPECT_TRUE(r.main != nullptr && r.validate != nullptr) << r.name;
    for (const std::string& c : r.configs) {
      EXPECT_NE(FindBuiltinConfig(c), nullptr) << c;
      listed.insert(c);
    }
  }
  for (const EmbeddedConfig& c : BuiltinConfigs()) EXPECT_EQ(listed.count(c.name), 1u) << c.name;
}

TEST(CliTest, ExitCodes) {
  EXPECT_EQ(CctuneMain({"ls"}), 0);
  EXPECT_EQ(CctuneMain({}), 2);
  EXPECT_EQ(CctuneMain({"nope"}), 2);
  EXPECT_EQ(CctuneMain({"run", "nope"}), 1);
  EXPECT_EQ(CctuneMain({"validate"}), 2);
  EXPECT_EQ(CctuneMain({"cp", "llama2c/generation"}), 2);
}

}  // namespace
}  // namespace cctune
