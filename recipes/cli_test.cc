#include "recipes/cli.h"

#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "config/catalog.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "recipes/builtin_configs.h"

namespace cctune {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;

// Every config a recipe lists is built in, and every built-in config belongs to a recipe.
TEST(CliTest, RecipesAndBuiltinConfigsAgree) {
  std::set<std::string> listed;
  for (const RecipeInfo& r : Recipes()) {
    EXPECT_TRUE(r.main != nullptr && r.validate != nullptr && r.register_components != nullptr)
        << r.name;
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

// `cctune ls --components` prints every kind's components with their keys, from the catalog.
TEST(CliTest, LsComponentsListsEveryKindWithKeys) {
  ::testing::internal::CaptureStdout();
  ASSERT_EQ(CctuneMain({"ls", "--components"}), 0);
  const std::string out = ::testing::internal::GetCapturedStdout();
  for (const char* kind : {"model", "tokenizer", "checkpointer", "dataset", "optimizer",
                           "lr_scheduler", "loss", "metric_logger"}) {
    EXPECT_THAT(out, HasSubstr(absl::StrCat("\n", kind, "  cctune."))) << kind;
  }
  // Every registered name is listed.
  for (const std::string& name : ComponentCatalog::Global().Names()) {
    EXPECT_THAT(out, HasSubstr(absl::StrCat("  ", name, "\n"))) << name;
  }
  EXPECT_THAT(out, HasSubstr("loss  cctune.modules.loss.CEWithChunkedOutputLoss\n"
                             "    also: torchtune.modules.loss.CEWithChunkedOutputLoss\n"));
  EXPECT_THAT(out, ContainsRegex("\n    num_output_chunks +int[^\n]* +0 +no +"));
  EXPECT_THAT(out, ContainsRegex("\n    lr +float +- +yes +learning rate\n"));
  EXPECT_THAT(out, HasSubstr("also: torchtune.optim.AdamW, torch.optim.AdamW\n"));
}

TEST(CliTest, LsComponentsKindFilter) {
  ::testing::internal::CaptureStdout();
  ASSERT_EQ(CctuneMain({"ls", "--components", "--kind", "loss"}), 0);
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_THAT(out, HasSubstr("torchtune.modules.loss.CEWithChunkedOutputLoss"));
  EXPECT_THAT(out, HasSubstr("num_output_chunks"));
  EXPECT_THAT(out, Not(HasSubstr("optimizer  ")));
  EXPECT_THAT(out, Not(HasSubstr("cctune.optim.AdamW")));

  ::testing::internal::CaptureStderr();
  EXPECT_EQ(CctuneMain({"ls", "--components", "--kind", "nope"}), 1);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(err, HasSubstr("no components of kind 'nope'"));
  EXPECT_THAT(err, HasSubstr("lr_scheduler"));
  EXPECT_EQ(CctuneMain({"ls", "--kind", "loss"}), 2);  // --kind needs --components
  EXPECT_EQ(CctuneMain({"ls", "--bogus"}), 2);
}

}  // namespace
}  // namespace cctune
