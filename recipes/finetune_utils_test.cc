#include "recipes/finetune_utils.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "config/config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cctune {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::vector<ConfigError> Check(const std::string& dataset_yaml) {
  auto config = Config::FromString("dataset:\n" + dataset_yaml);
  EXPECT_TRUE(config.ok()) << config.status();
  if (!config.ok()) return {};
  return MissingDatasetFiles(config->root(), "dataset");
}

// The recipes' up-front dataset check resolves a source as the builder does: a hub repo id
// through the Hugging Face cache, a local file, 'json' + data_files.
TEST(MissingDatasetFilesTest, ResolvesSourcesAsTheBuilderDoes) {
  const std::string tmp = std::getenv("TEST_TMPDIR");
  const std::string hub = tmp + "/hub";
  std::filesystem::create_directories(hub);
  ASSERT_EQ(setenv("HF_HUB_CACHE", hub.c_str(), 1), 0);

  // A hub source that is not in the cache: the error says how to download it.
  std::vector<ConfigError> errors =
      Check("  _component_: torchtune.datasets.alpaca_dataset\n  source: yahma/alpaca-cleaned\n");
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].key, "dataset");
  EXPECT_THAT(errors[0].message,
              HasSubstr("huggingface-cli download --repo-type dataset yahma/alpaca-cleaned"));
  // The builder's default source is checked too.
  errors = Check("  _component_: torchtune.datasets.alpaca_cleaned_dataset\n");
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_THAT(errors[0].message, HasSubstr("yahma/alpaca-cleaned"));

  // The same repo once it is in the cache (refs/main -> snapshots/<commit>/).
  const std::string repo = hub + "/datasets--yahma--alpaca-cleaned";
  std::filesystem::create_directories(repo + "/refs");
  std::filesystem::create_directories(repo + "/snapshots/abc123");
  std::ofstream(repo + "/refs/main") << "abc123";
  std::ofstream(repo + "/snapshots/abc123/alpaca_data_cleaned.json")
      << R"([{"instruction": "a", "input": "", "output": "b"}])";
  EXPECT_THAT(Check("  _component_: torchtune.datasets.alpaca_dataset\n"
                    "  source: yahma/alpaca-cleaned\n"),
              IsEmpty());

  // Local files.
  const std::string file = tmp + "/data.jsonl";
  std::ofstream(file) << R"({"input": "a", "output": "b"})" << "\n";
  EXPECT_THAT(Check("  _component_: torchtune.datasets.instruct_dataset\n  source: json\n"
                    "  data_files: " + file + "\n"),
              IsEmpty());
  errors = Check("  _component_: torchtune.datasets.instruct_dataset\n  source: json\n"
                 "  data_files: " + tmp + "/missing.jsonl\n");
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_THAT(errors[0].message, HasSubstr("missing.jsonl"));

  // No source at all (a generated dataset), or no dataset component: nothing to check.
  EXPECT_THAT(Check("  _component_: cctune.data.synthetic_arithmetic\n"), IsEmpty());
  EXPECT_THAT(Check("  packed: false\n"), IsEmpty());
}

}  // namespace
}  // namespace cctune
