#include "recipes/cli.h"

#include <fstream>
#include <set>
#include <utility>
#include <string>

#include "absl/strings/str_cat.h"
#include "config/catalog.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "recipes/builtin_configs.h"
#include "tests/llama2c_fixture.h"

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

// `validate` of a config with a file of its own: exit code and stderr.
std::pair<int, std::string> ValidateFile(const std::string& name, const std::string& yaml) {
  const std::string path = testing::TestTempDir("cli_validate") + "/" + name;
  std::ofstream(path) << yaml;
  ::testing::internal::CaptureStderr();
  const int code = CctuneMain({"validate", path});
  return {code, ::testing::internal::GetCapturedStderr()};
}

// A torchtune header naming a recipe cctune lacks: the rest is still checked (components,
// ${}), and the unknown recipe is one more error. A header naming one of ours picks it.
TEST(CliTest, ValidateChecksEverythingUnderAnUnknownRecipe) {
  const auto [code, err] = ValidateFile("distributed.yaml", R"(# Config for knowledge distillation
#   tune run --nproc_per_node 2 knowledge_distillation_distributed --config qwen2/1.5_to_0.5B_KD_lora_distributed
output_dir: /tmp/x
model:
  _component_: torchtune.models.llama3_2.no_such_builder
optimizer:
  _component_: torch.optim.AdamW
  lr: ${missing_key}
)");
  EXPECT_EQ(code, 1);
  EXPECT_THAT(err, HasSubstr("unknown recipe 'knowledge_distillation_distributed'"));
  EXPECT_THAT(err, HasSubstr("no_such_builder"));
  EXPECT_THAT(err, HasSubstr("missing_key"));

  const auto [code2, err2] = ValidateFile("single.yaml", R"(# To launch:
#   tune run lora_finetune_single_device --config llama3_2/1B_lora_single_device
output_dir: /tmp/x
bogus_key: 1
)");
  EXPECT_EQ(code2, 1);
  EXPECT_THAT(err2, HasSubstr("accepted by lora_finetune_single_device"));
  EXPECT_THAT(err2, Not(HasSubstr("generate")));
  EXPECT_THAT(err2, Not(HasSubstr("unknown recipe")));
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
