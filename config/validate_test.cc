#include "config/validate.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cctune {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

absl::Status NonNegative(const ConfigNode& n) {
  if (n.float_value() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("must be >= 0, got ", n.text()));
  }
  return absl::OkStatus();
}

absl::Status Positive(const ConfigNode& n) {
  if (n.int_value() <= 0) return absl::InvalidArgumentError(absl::StrCat("must be > 0, got ", n.text()));
  return absl::OkStatus();
}

// A catalog with the components a generation config uses, and a recipe schema in the spirit
// of recipes/generate.
class ValidateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(catalog_
                    .Add("cctune.models.llama2c.stories", "model",
                         Schema()
                             .Default("num_layers", KeyType::Int(), ConfigNode::Int(6), "layers")
                             .Default("dim", KeyType::Int(), ConfigNode::Int(288), "width"))
                    .ok());
    ASSERT_TRUE(catalog_
                    .Add("cctune.training.FullModelHFCheckpointer", "checkpointer",
                         Schema()
                             .Required("checkpoint_dir", KeyType::String(), "where the files are")
                             .Required("checkpoint_files", KeyType::List(KeyType::String()),
                                       "weight files")
                             .Optional("output_dir", KeyType::String(), "where to save")
                             .Required("model_type", KeyType::Enum({"LLAMA2", "LLAMA3"}),
                                       "architecture"))
                    .ok());
    ASSERT_TRUE(catalog_
                    .Add("cctune.models.llama2c.tokenizer", "tokenizer",
                         Schema()
                             .Required("path", KeyType::String(), "tokenizer file")
                             .Default("max_seq_len", KeyType::Int().OrNull(), ConfigNode::Null(),
                                      "truncation"))
                    .ok());
    ASSERT_TRUE(catalog_
                    .Add("cctune.training.metric_logging.DiskLogger", "metric_logger",
                         Schema().Required("log_dir", KeyType::String(), "directory"))
                    .ok());
    recipe_ = Schema("recipe 'generate'")
                  .Required("model", KeyType::Component("model"), "the model")
                  .Required("checkpointer", KeyType::Component("checkpointer"), "weights")
                  .Required("tokenizer", KeyType::Component("tokenizer"), "tokenizer")
                  .Default("device", KeyType::Enum({"cpu", "cuda"}), ConfigNode::String("cpu"), "")
                  .Default("dtype", KeyType::Enum({"fp32", "bf16"}), ConfigNode::String("fp32"), "")
                  .Optional("seed", KeyType::Int().OrNull(), "")
                  .Optional("output_dir", KeyType::String(), "")
                  .Optional("prompt",
                            KeyType::Object(Schema("prompt")
                                                .Optional("system", KeyType::String().OrNull(), "")
                                                .Required("user", KeyType::String(), "")),
                            "")
                  .Required("max_new_tokens", KeyType::Int(), "")
                  .Check("max_new_tokens", Positive)
                  .Default("temperature", KeyType::Float(), ConfigNode::Float(0.6), "")
                  .Check("temperature", NonNegative)
                  .Optional("top_k", KeyType::Int().OrNull(), "")
                  .Default("enable_kv_cache", KeyType::Bool(), ConfigNode::Bool(true), "")
                  .Optional("quantizer", KeyType::Component("quantizer").OrNull(), "")
                  .Optional("loggers", KeyType::List(KeyType::Component("metric_logger")), "")
                  .Optional("extra", KeyType::Any(), "free-form");
  }

  std::vector<std::string> Check(const std::string& yaml,
                                 const std::vector<std::string>& overrides = {}) {
    auto cfg = Config::FromString(yaml, "v.yaml");
    CCTUNE_CHECK_OK(cfg);
    CCTUNE_CHECK_OK(cfg->ApplyOverrides(overrides));
    std::vector<std::string> out;
    for (const ConfigError& e : Validate(*cfg, recipe_, catalog_)) out.push_back(e.ToString());
    return out;
  }

  // A valid config; tests append or override to break one thing.
  static constexpr char kGood[] = R"(model:
  _component_: torchtune.models.llama2c.stories
checkpointer:
  _component_: torchtune.training.FullModelHFCheckpointer
  checkpoint_dir: /ckpt
  checkpoint_files: [a.bin]
  model_type: LLAMA2
tokenizer:
  _component_: cctune.models.llama2c.tokenizer
  path: ${checkpointer.checkpoint_dir}/tok.bin
max_new_tokens: 10
)";

  ComponentCatalog catalog_;
  Schema recipe_;
};

TEST_F(ValidateTest, GoodConfigsHaveNoProblems) {
  EXPECT_THAT(Check(kGood), IsEmpty());
  auto cfg = LoadConfig("config/testdata/generation.yaml");
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  // generation.yaml's model is "stories" with num_layers; its checkpointer misses nothing.
  EXPECT_THAT(Validate(*cfg, recipe_, catalog_), IsEmpty());
}

TEST_F(ValidateTest, ReportsEveryProblemAtOnceWithFileLineAndKey) {
  auto cfg = Config::FromFile("config/testdata/broken_generation.yaml");
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  std::vector<std::string> errors;
  for (const ConfigError& e : Validate(*cfg, recipe_, catalog_)) errors.push_back(e.ToString());
  const std::string f = "config/testdata/broken_generation.yaml";
  EXPECT_THAT(
      errors,
      ElementsAre(
          f + ":1: key 'tokenizer': missing required key (tokenizer component: tokenizer) of "
              "recipe 'generate'",
          f + ":4: key 'model.num_layer': unknown key 'num_layer'; did you mean 'num_layers'?; "
              "keys accepted by cctune.models.llama2c.stories: num_layers, dim",
          f + ":5: key 'checkpointer.checkpoint_dir': missing required key (string: where the "
              "files are) of cctune.training.FullModelHFCheckpointer",
          f + ":8: key 'checkpointer.output_dir': interpolation ${outptu_dir} refers to missing "
              "key 'outptu_dir' (the config has keys: model, checkpointer, device, "
              "max_new_tokens, temperature)",
          f + ":11: key 'max_new_tokens': expected int, got string 'many'"));
  const absl::Status status = ErrorsToStatus(Validate(*cfg, recipe_, catalog_));
  EXPECT_THAT(std::string(status.message()), HasSubstr("5 problems in the config:"));
}

TEST_F(ValidateTest, ComponentProblems) {
  EXPECT_THAT(Check(std::string(kGood) + "quantizer:\n  _component_: cctune.models.llama2c.stories\n"),
              ElementsAre("v.yaml:13: key 'quantizer._component_': "
                          "'cctune.models.llama2c.stories' is a model component, but a "
                          "quantizer component is expected here"));
  EXPECT_THAT(Check(kGood, {"model=cctune.models.llama2c.storeis"}),
              ElementsAre(HasSubstr("command-line override "
                                    "'model=cctune.models.llama2c.storeis': key "
                                    "'model._component_': unknown component "
                                    "'cctune.models.llama2c.storeis'; did you mean "
                                    "'cctune.models.llama2c.stories'?; registered model "
                                    "components: cctune.models.llama2c.stories")));
  EXPECT_THAT(Check(kGood, {"model={num_layers: 2, dim: x}"}),
              ElementsAre("command-line override 'model={num_layers: 2, dim: x}': key "
                          "'model.dim': expected int, got string 'x'"));
  EXPECT_THAT(Check(std::string(kGood) + "quantizer: {bits: 4}\n"),
              ElementsAre("v.yaml:12: key 'quantizer': missing _component_: the name of the "
                          "quantizer component to build"));
  EXPECT_THAT(Check(std::string(kGood) + "quantizer: int4\n"),
              ElementsAre(HasSubstr("v.yaml:12: key 'quantizer': expected quantizer component "
                                    "or null (a map with a _component_ key), got string "
                                    "'int4'")));
  EXPECT_THAT(Check(std::string(kGood) + "quantizer: {_component_: 5}\n"),
              ElementsAre(HasSubstr("expected a component name, got int 5")));
  EXPECT_THAT(Check(std::string(kGood) + "quantizer: null\n"), IsEmpty());
}

TEST_F(ValidateTest, NestedSchemasListsAndFreeFormValues) {
  EXPECT_THAT(Check(std::string(kGood) + "prompt:\n  usr: hi\n"),
              ElementsAre(
                  "v.yaml:12: key 'prompt.user': missing required key (string) of prompt",
                  "v.yaml:13: key 'prompt.usr': unknown key 'usr'; did you mean 'user'?; keys "
                  "accepted by prompt: system, user"));
  EXPECT_THAT(Check(std::string(kGood) +
                    "loggers:\n  - {_component_: cctune.training.metric_logging.DiskLogger, "
                    "log_dir: /l}\n  - {_component_: cctune.training.metric_logging.DiskLogger}\n"
                    "  - 3\n"),
              ElementsAre(HasSubstr("v.yaml:14: key 'loggers[1].log_dir': missing required "
                                    "key"),
                          "v.yaml:15: key 'loggers[2]': expected metric_logger component (a map "
                          "with a _component_ key), got int 3"));
  // Components inside free-form values are still checked.
  EXPECT_THAT(Check(std::string(kGood) + "extra:\n  deep:\n    - _component_: cctune.nothing\n"),
              ElementsAre(HasSubstr("v.yaml:14: key 'extra.deep[0]._component_': unknown "
                                    "component 'cctune.nothing'")));
  EXPECT_THAT(Check(kGood, {"checkpointer.checkpoint_files=[a.bin, 2]"}),
              ElementsAre(HasSubstr("key 'checkpointer.checkpoint_files[1]': expected string, "
                                    "got int 2")));
}

TEST_F(ValidateTest, ChecksTypesEnumsAndOverrideLocations) {
  EXPECT_THAT(Check(kGood, {"temperature=-0.5", "max_new_tokens=0", "device=tpu",
                            "enable_kv_cache=maybe", "top_k=null", "seed=7"}),
              ElementsAre("command-line override 'device=tpu': key 'device': expected one of "
                          "cpu|cuda, got string 'tpu'",
                          "command-line override 'enable_kv_cache=maybe': key "
                          "'enable_kv_cache': expected bool, got string 'maybe'",
                          "command-line override 'max_new_tokens=0': key 'max_new_tokens': "
                          "must be > 0, got 0",
                          "command-line override 'temperature=-0.5': key 'temperature': must "
                          "be >= 0, got -0.5"));
  EXPECT_THAT(Check(kGood, {"surprise=1"}),
              ElementsAre(HasSubstr("key 'surprise': unknown key 'surprise'; keys accepted by "
                                    "recipe 'generate': model, checkpointer, tokenizer, device, "
                                    "dtype, seed")));
}

TEST_F(ValidateTest, InterpolationFailuresAreNotReportedTwice) {
  // max_new_tokens would be a type error if it were checked unresolved; it is reported once,
  // as the cycle, and the key that depends on it is skipped.
  EXPECT_THAT(Check(std::string(kGood) + "a: ${b}\nb: ${a}\n", {"max_new_tokens=${a}"}),
              ElementsAre(HasSubstr("v.yaml:12: key 'a': unknown key"),
                          "v.yaml:13: key 'b': interpolation cycle: ${a} -> ${b} -> ${a}",
                          HasSubstr("v.yaml:13: key 'b': unknown key")));
}

TEST_F(ValidateTest, ResolvedConfigsAreCheckedAsTheyAre) {
  auto cfg = Config::FromString(kGood, "v.yaml");
  ASSERT_TRUE(cfg.ok());
  ASSERT_TRUE(cfg->Resolve().ok());
  EXPECT_THAT(Validate(*cfg, recipe_, catalog_), IsEmpty());
}

TEST_F(ValidateTest, WithDefaultsFillsAbsentKeysOnly) {
  auto cfg = Config::FromString("prompt: {user: hi}\nmax_new_tokens: 3\ntemperature: 1\n", "d.yaml");
  ASSERT_TRUE(cfg.ok());
  ConfigNode filled = WithDefaults(cfg->root(), recipe_);
  EXPECT_EQ(*filled.GetString("device"), "cpu");
  EXPECT_EQ(*filled.GetBool("enable_kv_cache"), true);
  EXPECT_EQ(*filled.GetInt("temperature"), 1);  // present: kept
  EXPECT_EQ(filled.Find("seed"), nullptr);       // optional without default: absent
  EXPECT_EQ(filled.Find("device")->location().source,
            "default of 'device' in recipe 'generate'");
  EXPECT_EQ(filled.Find("device")->path(), "device");
}

TEST_F(ValidateTest, CheckHelpersWorkOnSingleNodes) {
  auto cfg = Config::FromString("tok:\n  _component_: cctune.models.llama2c.tokenizer\n", "h.yaml");
  ASSERT_TRUE(cfg.ok());
  std::vector<ConfigError> errors;
  CheckComponent(*cfg->Find("tok"), "tokenizer", catalog_, &errors);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].ToString(),
            "h.yaml:1: key 'tok.path': missing required key (string: tokenizer file) of "
            "cctune.models.llama2c.tokenizer");
  errors.clear();
  CheckAgainstSchema(ConfigNode::Int(1), recipe_, catalog_, &errors);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_THAT(errors[0].message, HasSubstr("expected a map"));
}

TEST(ValidateScaleTest, HundredThousandKeysAndOverridesLoadResolveAndValidate) {
  constexpr int kKeys = 100000;
  std::string yaml = "base: /d\nknown: 1\n";
  for (int i = 0; i < kKeys; ++i) absl::StrAppend(&yaml, "k", i, ": ${base}/", i, "\n");
  auto config = Config::FromString(yaml, "big.yaml");
  ASSERT_TRUE(config.ok()) << config.status();
  std::vector<std::string> overrides;
  for (int i = 0; i < kKeys; ++i) overrides.push_back(absl::StrCat("o", i, "=${k", i, "}"));
  ASSERT_TRUE(config->ApplyOverrides(overrides).ok());
  ASSERT_TRUE(config->Resolve().ok());
  EXPECT_EQ(*config->GetString("o99999"), "/d/99999");
  ComponentCatalog catalog;
  const Schema schema = Schema("scale").Required("known", KeyType::Int(), "a key");
  const std::vector<ConfigError> errors = Validate(*config, schema, catalog);
  // base, k* and o* are unknown; each is reported, and the message stays short.
  ASSERT_EQ(errors.size(), 2u * kKeys + 1);
  EXPECT_THAT(errors[1].ToString(), HasSubstr("big.yaml:3: key 'k0': unknown key 'k0'"));
  const absl::Status status = ErrorsToStatus(errors);
  EXPECT_THAT(std::string(status.message()), HasSubstr("... and 199901 more"));
  EXPECT_LT(status.message().size(), 100000u);
}

}  // namespace
}  // namespace cctune
