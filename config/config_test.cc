#include "config/config.h"

#include <string>

#include "config/yaml_loader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cctune {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string Msg(const absl::Status& s) { return std::string(s.message()); }

constexpr char kGeneration[] = "config/testdata/generation.yaml";

TEST(ConfigTest, LoadConfigAppliesOverridesBeforeInterpolation) {
  auto cfg = LoadConfig(kGeneration, {"output_dir=/tmp/elsewhere",
                                      "checkpointer.checkpoint_dir=/data/ckpt",
                                      "max_new_tokens=8"});
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_TRUE(cfg->resolved());
  EXPECT_EQ(cfg->path(), kGeneration);
  // ${output_dir} and ${checkpointer.checkpoint_dir} see the overridden values.
  EXPECT_EQ(*cfg->GetString("checkpointer.output_dir"), "/tmp/elsewhere");
  EXPECT_EQ(*cfg->GetString("tokenizer.path"), "/data/ckpt/tok512.bin");
  EXPECT_EQ(*cfg->GetInt("max_new_tokens"), 8);
  EXPECT_EQ(*cfg->GetInt("seed"), 1234);
  EXPECT_THAT(*cfg->GetList<std::string>("checkpointer.checkpoint_files"),
              ElementsAre("stories260K.bin"));
  EXPECT_EQ(*cfg->GetOptionalString("prompt.system"), std::nullopt);
  EXPECT_EQ(*cfg->GetOr<int64_t>("top_p_missing", 5), 5);
  EXPECT_TRUE(cfg->Has("quantizer"));
  // The unresolved tree still has the references.
  EXPECT_EQ(*cfg->unresolved().GetString("checkpointer.output_dir"), "${output_dir}");
}

TEST(ConfigTest, AccessorErrorsNameTheFileAndLine) {
  auto cfg = LoadConfig(kGeneration);
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  auto s = cfg->GetInt("dtype");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(Msg(s.status()),
            "config/testdata/generation.yaml:19: key 'dtype': expected int, got string 'fp32' "
            "(remove the quotes to make it a number)");
  // A value set by an override names the override instead of a line.
  auto over = LoadConfig(kGeneration, {"seed=abc"});
  ASSERT_TRUE(over.ok());
  EXPECT_THAT(Msg(over->GetInt("seed").status()),
              StartsWith("command-line override 'seed=abc': key 'seed': expected int"));
}

TEST(ConfigTest, ResolveFailureListsEveryProblemAndKeepsTheTree) {
  auto cfg = Config::FromString("a: ${b}\nb: ${a}\nc: ${missing}\nd: 4\n", "r.yaml");
  ASSERT_TRUE(cfg.ok());
  const absl::Status s = cfg->Resolve();
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(Msg(s), HasSubstr("2 problems"));
  EXPECT_THAT(Msg(s), HasSubstr("r.yaml:2: key 'b': interpolation cycle: ${a} -> ${b} -> ${a}"));
  EXPECT_THAT(Msg(s), HasSubstr("r.yaml:3: key 'c': interpolation ${missing} refers to missing "
                                "key 'missing'"));
  EXPECT_FALSE(cfg->resolved());
  EXPECT_EQ(*cfg->GetInt("d"), 4);
  // Fixing it with an override makes it resolve.
  ASSERT_TRUE(cfg->ApplyOverrides({"a=1", "missing=m"}).ok());
  ASSERT_TRUE(cfg->Resolve().ok());
  EXPECT_EQ(*cfg->GetInt("b"), 1);
  EXPECT_EQ(*cfg->GetString("c"), "m");
}

TEST(ConfigTest, OverridesAfterResolveStartFromTheUnresolvedTree) {
  auto cfg = Config::FromString("dir: /a\nlog: ${dir}/log\nlit: \\${dir}\n");
  ASSERT_TRUE(cfg.ok());
  ASSERT_TRUE(cfg->Resolve().ok());
  EXPECT_EQ(*cfg->GetString("log"), "/a/log");
  EXPECT_EQ(*cfg->GetString("lit"), "${dir}");
  ASSERT_TRUE(cfg->ApplyOverride("dir=/b").ok());
  EXPECT_FALSE(cfg->resolved());
  ASSERT_TRUE(cfg->Resolve().ok());
  EXPECT_EQ(*cfg->GetString("log"), "/b/log");
  EXPECT_EQ(*cfg->GetString("lit"), "${dir}");  // the escape is applied once, not twice
}

TEST(ConfigTest, ResolvedYamlLoadsBackToTheSameTree) {
  auto cfg = LoadConfig(kGeneration, {"prompt.user=Hi: there # not a comment"});
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  const std::string yaml = cfg->ToYaml();
  EXPECT_THAT(yaml, HasSubstr("output_dir: /tmp/cctune_test_out\n"));
  EXPECT_THAT(yaml, HasSubstr("  _component_: torchtune.models.llama2c.stories\n"));
  auto back = LoadYamlString(yaml, "dump.yaml");
  ASSERT_TRUE(back.ok()) << back.status() << "\n" << yaml;
  EXPECT_EQ(*back, cfg->root()) << yaml;
}

TEST(ConfigTest, LoadErrors) {
  auto missing = LoadConfig("config/testdata/absent.yaml");
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(absl::IsNotFound(missing.status()));
  auto malformed = LoadConfig("config/testdata/malformed.yaml");
  ASSERT_FALSE(malformed.ok());
  EXPECT_THAT(Msg(malformed.status()), StartsWith("config/testdata/malformed.yaml:7:"));
  auto bad_override = LoadConfig(kGeneration, {"model.num_layers"});
  ASSERT_FALSE(bad_override.ok());
  EXPECT_THAT(Msg(bad_override.status()), HasSubstr("'model.num_layers'"));
  auto not_map = Config::FromNode(ConfigNode::Int(3));
  ASSERT_FALSE(not_map.ok());
  EXPECT_THAT(Msg(not_map.status()), HasSubstr("must be a map"));
}

}  // namespace
}  // namespace cctune
