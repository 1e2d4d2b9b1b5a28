#include "recipes/quantize_recipe.h"

#include <filesystem>
#include <fstream>
#include <string>

#include "checkpoint/safetensors.h"
#include "config/config.h"
#include "core/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "recipes/generate_recipe.h"
#include "tests/llama2c_fixture.h"

namespace cctune {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr char kInt4[] =
    "quantizer: {_component_: torchtune.training.quantization.Int4WeightOnlyQuantizer, "
    "groupsize: 32}\n";
constexpr char kInt8[] =
    "quantizer: {_component_: torchtune.training.quantization.Int8WeightOnlyQuantizer}\n";

class QuantizeRecipeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::TestTempDir("quantize_recipe");
    ASSERT_TRUE(testing::WriteLlama2cFixture(dir_).ok());
  }
  std::string Write(const std::string& name, const std::string& yaml) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << yaml;
    return path;
  }
  std::string QuantizeYaml(const std::string& quantizer) {
    return "output_dir: " + dir_ + "/out\nmodel: {_component_: cctune.models.llama2c.llama2c}\n" +
           "checkpointer:\n  _component_: cctune.training.Llama2cCheckpointer\n"
           "  checkpoint_dir: " + dir_ + "\n  checkpoint_files: [model.bin]\n" + quantizer;
  }
  // A generate config reading `files` from `ck_dir` with `checkpointer`.
  std::string GenerateYaml(const std::string& checkpointer, const std::string& ck_dir,
                           const std::string& file, const std::string& quantizer) {
    return "model: {_component_: cctune.models.llama2c.llama2c}\ncheckpointer:\n  _component_: " +
           checkpointer + "\n  checkpoint_dir: " + ck_dir + "\n  checkpoint_files: [" + file +
           "]\ntokenizer:\n  _component_: cctune.models.llama2c.llama2c_tokenizer\n  path: " +
           dir_ + "/tok.bin\nprompt: {user: hi}\nmax_new_tokens: 8\ntemperature: 0\nseed: 1\n" +
           quantizer;
  }
  std::string dir_;
};

TEST_F(QuantizeRecipeTest, WritesACheckpointThatGenerateLoadsAsIs) {
  ASSERT_EQ(RecipeMain(QuantizeRecipe(), {"--config", Write("q.yaml", QuantizeYaml(kInt4))}), 0);
  const std::string out = dir_ + "/out/model-4w.safetensors";
  ASSERT_TRUE(std::filesystem::exists(out));
  SafetensorsFile file = ValueOrDie(SafetensorsFile::Open(out));
  EXPECT_EQ(file.metadata().at("quantizer"), "Int4WeightOnlyQuantizer");
  EXPECT_EQ(file.metadata().at("groupsize"), "32");
  EXPECT_EQ(file.metadata().at("model_args.dim"), "32");
  EXPECT_EQ(ValueOrDie(file.Entry("layers.0.attn.q_proj.weight")).dtype, DType::kI32);
  EXPECT_EQ(ValueOrDie(file.Entry("layers.0.attn.q_proj.zeros")).dtype, DType::kBF16);
  EXPECT_EQ(ValueOrDie(file.Entry("tok_embeddings.weight")).dtype, DType::kF32);

  const std::string tt = "cctune.training.FullModelTorchTuneCheckpointer";
  EXPECT_EQ(RecipeMain(GenerateRecipe(),
                       {"--config", Write("g.yaml", GenerateYaml(tt, dir_ + "/out",
                                                                  "model-4w.safetensors", kInt4))}),
            0);
  // The wrong quantizer, or none, is refused.
  EXPECT_EQ(RecipeMain(GenerateRecipe(),
                       {"--config", Write("g8.yaml", GenerateYaml(tt, dir_ + "/out",
                                                                   "model-4w.safetensors", kInt8))}),
            1);

  Config cfg = ValueOrDie(Config::FromString(
      GenerateYaml(tt, dir_ + "/out", "model-4w.safetensors", kInt8), "g.yaml"));
  ASSERT_TRUE(RegisterGenerateComponents().ok());
  ASSERT_TRUE(cfg.Resolve().ok());
  auto ck = ValueOrDie(CheckpointerRegistry().InstantiateKey(cfg.root(), "checkpointer"));
  LoadedCheckpoint loaded = ValueOrDie(ck->LoadCheckpoint());
  EXPECT_THAT(BuildModelForCheckpoint(cfg.root(), loaded).status().message(),
              AllOf(HasSubstr("Int8WeightOnlyQuantizer"), HasSubstr("Int4WeightOnlyQuantizer"),
                    HasSubstr("groupsize 32"), HasSubstr("model-4w.safetensors")));
  Config none = ValueOrDie(Config::FromString(
      GenerateYaml(tt, dir_ + "/out", "model-4w.safetensors", "quantizer: null\n"), "g.yaml"));
  ASSERT_TRUE(none.Resolve().ok());
  EXPECT_THAT(BuildModelForCheckpoint(none.root(), loaded).status().message(),
              HasSubstr("quantizer.groupsize=32"));
}

TEST_F(QuantizeRecipeTest, GenerateQuantizesAFullPrecisionCheckpointAtLoad) {
  for (const char* q : {kInt8, kInt4}) {
    EXPECT_EQ(RecipeMain(GenerateRecipe(),
                         {"--config", Write("g.yaml", GenerateYaml("cctune.training.Llama2cCheckpointer",
                                                                    dir_, "model.bin", q))}),
              0)
        << q;
  }
}

TEST_F(QuantizeRecipeTest, BadConfigsAreRefused) {
  // No quantizer; a groupsize out of range; an already-quantized input.
  EXPECT_EQ(RecipeMain(QuantizeRecipe(), {"--config", Write("a.yaml", QuantizeYaml(""))}), 1);
  EXPECT_EQ(RecipeMain(QuantizeRecipe(),
                       {"--config", Write("b.yaml", QuantizeYaml(
                                                        "quantizer: {_component_: cctune.training."
                                                        "quantization.Int4WeightOnlyQuantizer, "
                                                        "groupsize: 40}\n"))}),
            1);
  Config cfg = ValueOrDie(Config::FromString(QuantizeYaml(kInt8) + "device: cuda\n", "q.yaml"));
  std::string all;
  for (const ConfigError& e : ValidateQuantizeConfig(cfg)) all += e.ToString();
  EXPECT_THAT(all, AllOf(HasSubstr("device"), HasSubstr("cuda")));
}

}  // namespace
}  // namespace cctune
