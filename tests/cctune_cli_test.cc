// The cctune CLI through its binary (//recipes:cctune): ls, cp, validate (good and bad
// configs: every problem reported at once with file:line, non-zero exit) and run.
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/llama2c_fixture.h"
#include "tests/subprocess.h"
#include "tests/util/shared_dir.h"

namespace cctune {
namespace testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

ProcessResult Cctune(std::vector<std::string> args, const std::string& cwd = "") {
  args.insert(args.begin(), RunfilePath("recipes/cctune"));
  return RunProcess(args, cwd);
}

const std::vector<std::string>& BuiltinNames() {
  static const auto* names =
      new std::vector<std::string>{"llama2/7B_generation",
                                   "llama3_1/8B_generation",
                                   "llama3_2/1B_generation",
                                   "llama2c/generation",
                                   "demo/generation",
                                   "demo/full_finetune",
                                   "llama3_1/8B_full_single_device",
                                   "llama3_2/1B_full_single_device",
                                   "demo/lora_finetune",
                                   "llama3_1/8B_lora_single_device",
                                   "llama3_2/1B_lora_single_device",
                                   "demo/full_finetune_distributed",
                                   "llama3_1/8B_full",
                                   "llama3_2/1B_full",
                                   "demo/lora_finetune_distributed",
                                   "llama3_1/8B_lora",
                                   "llama3_2/1B_lora",
                                   "llama2c/quantization"};
  return *names;
}

TEST(CctuneCliTest, LsListsRecipesAndConfigs) {
  ProcessResult r = Cctune({"ls"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<std::string> lines = absl::StrSplit(r.out, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 1 + BuiltinNames().size()) << r.out;
  EXPECT_THAT(lines[0], AllOf(HasSubstr("RECIPE"), HasSubstr("CONFIG")));
  EXPECT_EQ(lines[1].rfind("generate ", 0), 0u) << lines[1];
  EXPECT_EQ(lines[6].rfind("full_finetune_single_device ", 0), 0u) << lines[6];
  for (size_t i = 0; i < BuiltinNames().size(); ++i) {
    EXPECT_THAT(lines[1 + i], HasSubstr(BuiltinNames()[i]));
  }
}

TEST(CctuneCliTest, HelpAndBadVerbs) {
  ProcessResult r = Cctune({"--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out,
              AllOf(HasSubstr("ls"), HasSubstr("cp"), HasSubstr("validate"), HasSubstr("run")));
  r = Cctune({});
  EXPECT_EQ(r.exit_code, 2);
  r = Cctune({"download"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("invalid choice: 'download'"));
  r = Cctune({"run", "lora_finetune_nope", "--config", "x"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("unknown recipe 'lora_finetune_nope'"));
  r = Cctune({"run", "full_finetune_single_device", "--config", "x"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("config 'x' is neither a file nor a built-in config"));
}

TEST(CctuneCliTest, CpCopiesBuiltinConfigsVerbatim) {
  const std::string dir = testing::TestTempDir("cctune_cp");
  for (const std::string& name : BuiltinNames()) {
    const std::string dest = dir + "/" + absl::StrReplaceAll(name, {{"/", "_"}}) + ".yaml";
    ProcessResult r = Cctune({"cp", name, dest});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, "Copied file to " + dest + "\n");
    EXPECT_EQ(ReadFile(dest), ReadFile(RunfilePath("configs/" + name + ".yaml"))) << name;
  }
  // Into a directory, without an extension, relative to the working directory.
  ProcessResult r = Cctune({"cp", "llama2c/generation.yaml", dir});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(std::filesystem::exists(dir + "/generation.yaml"));
  r = Cctune({"cp", "configs/llama2c/generation.yaml", "mine"}, dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "Copied file to mine.yaml\n");
  EXPECT_TRUE(std::filesystem::exists(dir + "/mine.yaml"));
}

TEST(CctuneCliTest, CpErrors) {
  const std::string dir = testing::TestTempDir("cctune_cp_errors");
  ProcessResult r = Cctune({"cp", "llama2c/generation", dir + "/a/b/c.yaml"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("--make-parents"));
  r = Cctune({"cp", "llama2c/generation", dir + "/a/b/c.yaml", "--make-parents"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(std::filesystem::exists(dir + "/a/b/c.yaml"));
  r = Cctune({"cp", "llama9/generation", dir + "/x.yaml"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("Invalid file name: llama9/generation"));
  r = Cctune({"cp", "generate", dir + "/x.yaml"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("is a recipe"));
  r = Cctune({"cp", "llama2c/generation"});
  EXPECT_EQ(r.exit_code, 2);
}

class CctuneValidateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fixture_ = testing::TestTempDir("cctune_validate");
    ASSERT_TRUE(testing::WriteLlama2cFixture(fixture_).ok());
  }
  ProcessResult Validate(const std::string& testdata, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"validate", RunfilePath("tests/testdata/" + testdata),
                                     "shared_dir=" + fixture_};
    args.insert(args.end(), extra.begin(), extra.end());
    return Cctune(args);
  }
  std::string fixture_;
};

TEST_F(CctuneValidateTest, GoodConfig) {
  ProcessResult r = Validate("good.yaml");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "Config is well-formed!\n");
  // ... which also runs.
  ProcessResult run = Cctune({"run", "generate", "--config",
                              RunfilePath("tests/testdata/good.yaml"), "shared_dir=" + fixture_});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("the cat"));
}

TEST_F(CctuneValidateTest, MissingCheckpointDirectory) {
  ProcessResult r = Validate("good.yaml", {"shared_dir=/nonexistent/dir"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("checkpoint directory '/nonexistent/dir' does not exist"));
  EXPECT_THAT(r.err, HasSubstr("tokenizer file '/nonexistent/dir/tok.bin' does not exist"));
  EXPECT_EQ(r.out, "");
}

TEST_F(CctuneValidateTest, UnknownKeysAllReported) {
  ProcessResult r = Validate("unknown_key.yaml");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("unknown_key.yaml:13: key 'max_new_tokenz': unknown key"));
  EXPECT_THAT(r.err, HasSubstr("did you mean 'max_new_tokens'"));
  EXPECT_THAT(r.err, HasSubstr("unknown_key.yaml:11: key 'tokenizer.pth': unknown key"));
  EXPECT_THAT(r.err, HasSubstr("'path'"));  // the missing required key / the suggestion
}

TEST_F(CctuneValidateTest, WrongTypes) {
  ProcessResult r = Validate("wrong_type.yaml");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("wrong_type.yaml:13: key 'max_new_tokens': expected int in [1, "
                               "1048576], got string 'many'"));
  EXPECT_THAT(r.err, HasSubstr("wrong_type.yaml:14: key 'enable_kv_cache': expected bool"));
  // A bad override is reported the same way, naming the override.
  r = Validate("good.yaml", {"seed=abc"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("command-line override 'seed=abc': key 'seed': expected int"));
}

TEST_F(CctuneValidateTest, MissingCheckpointFile) {
  ProcessResult r = Validate("missing_checkpoint.yaml");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("missing_checkpoint.yaml:8"));
  EXPECT_THAT(r.err,
              HasSubstr("checkpoint file '" + fixture_ + "/no_such_model.bin' does not exist"));
}

TEST_F(CctuneValidateTest, InterpolationCycle) {
  ProcessResult r = Validate("cycle.yaml");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("interpolation cycle"));
  EXPECT_THAT(r.err, HasSubstr("cycle.yaml:"));
}

// Hostile configs: each is an error naming the file, with exit code 1, from `cctune validate`
// and from the recipe; they used to segfault (stack overflow) or run for minutes.
TEST_F(CctuneValidateTest, HostileConfigsAreErrorsNotCrashes) {
  const std::string dir = testing::TestTempDir("cctune_hostile");
  std::string laughs = "l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 9; ++i) {
    absl::StrAppend(&laughs, "l", i, ": &l", i, " [");
    for (int j = 0; j < 10; ++j) absl::StrAppend(&laughs, j ? ", " : "", "*l", i - 1);
    absl::StrAppend(&laughs, "]\n");
  }
  std::string chain;
  for (int i = 0; i < 5000; ++i) absl::StrAppend(&chain, "k", i, ": ${k", i + 1, "}\n");
  absl::StrAppend(&chain, "k5000: end\n");
  std::string many;
  for (int i = 0; i < 100000; ++i) absl::StrAppend(&many, "key_", i, ": ", i, "\n");
  const std::vector<std::pair<std::string, std::string>> files = {
      {"alias_cycle.yaml", "&a {b: *a}\n"},  // 11 bytes
      {"laughs.yaml", laughs},
      {"deep.yaml", "a: " + std::string(5000, '[') + std::string(5000, ']') + "\n"},
      {"chain.yaml", chain},
      {"many.yaml", many},
  };
  for (const auto& [name, text] : files) {
    const std::string path = dir + "/" + name;
    std::ofstream(path) << text;
    ProcessResult r = Cctune({"validate", path});
    EXPECT_EQ(r.exit_code, 1) << name << "\n" << r.err.substr(0, 2000);
    EXPECT_THAT(r.err, HasSubstr(path)) << name;
    ProcessResult run = Cctune({"run", "generate", "--config", path});
    EXPECT_EQ(run.exit_code, 1) << name << "\n" << run.err.substr(0, 2000);
    EXPECT_EQ(run.out, "") << name;
  }
}

TEST_F(CctuneValidateTest, MalformedYaml) {
  ProcessResult r = Validate("malformed.yaml");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("malformed.yaml:"));
  EXPECT_THAT(r.err, HasSubstr("malformed YAML"));
  // The recipe itself refuses it too.
  ProcessResult run =
      Cctune({"run", "generate", "--config", RunfilePath("tests/testdata/malformed.yaml")});
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.err, HasSubstr("malformed YAML"));
  EXPECT_EQ(run.out, "");
}

// The built-in configs are well-formed: the only problems are the absent checkpoints (HF
// models under /tmp; ../shared when it is absent).
TEST(CctuneBuiltinConfigsTest, OnlyMissingFilesAreReported) {
  for (const std::string& name : BuiltinNames()) {
    std::vector<std::string> args = {"validate", name};
    auto shared = testing::SharedDir();
    if (name == "llama2c/generation" && shared.ok()) args.push_back("shared_dir=" + *shared);
    ProcessResult r = Cctune(args);
    if (r.exit_code == 0) {
      EXPECT_EQ(r.out, "Config is well-formed!\n");
      continue;
    }
    std::vector<std::string> lines = absl::StrSplit(r.err, '\n', absl::SkipEmpty());
    ASSERT_GE(lines.size(), 1u) << r.err;
    // One problem: a single line; more: line 0 is "N problems in the config:".
    for (size_t i = lines.size() == 1 ? 0 : 1; i < lines.size(); ++i) {
      EXPECT_THAT(lines[i], HasSubstr("does not exist")) << name;
    }
  }
}

TEST(CctuneBuiltinConfigsTest, Stories260KConfigValidates) {
  auto shared = testing::SharedFile("models/stories260K/stories260K.bin");
  if (!shared.ok()) GTEST_SKIP() << shared.status();
  ProcessResult r =
      Cctune({"validate", "llama2c/generation", "shared_dir=" + *testing::SharedDir()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "Config is well-formed!\n");
}

}  // namespace
}  // namespace testing
}  // namespace cctune
