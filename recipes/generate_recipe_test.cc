#include "recipes/generate_recipe.h"

#include <string>

#include "checkpoint/checkpointer_components.h"
#include "config/config.h"
#include "core/status.h"
#include "core/tensor.h"
#include "generation/model_loader.h"
#include "recipes/quantize_recipe.h"
#include "tests/subprocess.h"
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

// The HF asset checkpoint (a Llama: q/k stored half-split) into a model that rotates
// half-split pairs of its own accord (Qwen2's builder, biases off): the weights must be
// reloaded permuted. The model is built once and, with
// a quantizer, the state dict quantized once (on the permuted weights), not once per load.
TEST(LoadGenerateModelTest, HalfSplitModelReloadsPermutedAndQuantizesOnce) {
  ASSERT_TRUE(RegisterGenerateComponents().ok());
  const std::string yaml =
      "model:\n  _component_: cctune.models.qwen2.qwen2\n  vocab_size: 32\n"
      "  num_layers: 2\n  num_heads: 4\n  num_kv_heads: 2\n  embed_dim: 16\n"
      "  intermediate_dim: 24\n  max_seq_len: 64\n  q_proj_bias: false\n"
      "  k_proj_bias: false\n  v_proj_bias: false\n"
      "checkpointer:\n  _component_: torchtune.training.FullModelHFCheckpointer\n"
      "  checkpoint_dir: " + testing::RunfilePath("tests/assets/checkpoint/tiny_llama") +
      "\n  checkpoint_files: [model.safetensors]\n  model_type: LLAMA2\n"
      "quantizer: {_component_: cctune.training.quantization.Int8WeightOnlyQuantizer}\n";
  Config cfg = ValueOrDie(Config::FromString(yaml, "gen.yaml"));
  std::unique_ptr<Checkpointer> ck =
      ValueOrDie(CheckpointerRegistry().InstantiateKey(cfg.root(), "checkpointer"));

  LoadedCheckpoint ckpt;
  ::testing::internal::CaptureStderr();
  absl::StatusOr<std::unique_ptr<TransformerDecoder>> model =
      LoadGenerateModel(cfg.root(), *ck, ckpt);
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(model.ok()) << model.status().ToString() << "\n" << err;
  EXPECT_FALSE(ckpt.qk_half_split);  // reloaded with q/k permuted
  size_t quantized = 0;
  for (size_t at = err.find("Quantized the weights at load"); at != std::string::npos;
       at = err.find("Quantized the weights at load", at + 1)) {
    ++quantized;
  }
  EXPECT_EQ(quantized, 1u) << err;

  // The same as building for a checkpoint loaded permuted in the first place.
  LoadedCheckpoint permuted = ValueOrDie(ck->LoadCheckpoint());
  ::testing::internal::CaptureStderr();
  std::unique_ptr<TransformerDecoder> reference =
      ValueOrDie(BuildModelForCheckpoint(cfg.root(), permuted));
  ::testing::internal::GetCapturedStderr();
  ParameterArena arena = ValueOrDie(LoadWeights(**model, ckpt.state_dict, DType::kF32,
                                                Device::Cpu(), /*view_checkpoint=*/true));
  ParameterArena ref_arena = ValueOrDie(LoadWeights(*reference, permuted.state_dict, DType::kF32,
                                                    Device::Cpu(), /*view_checkpoint=*/true));
  const std::vector<int32_t> ids = {1, 5, 31, 7, 0, 19, 4};
  Tensor tokens = ValueOrDie(Tensor::FromVector(ids, {1, 7}));
  Tensor got = ValueOrDie(Tensor::Empty({1, 7, 32}, DType::kF32));
  Tensor want = ValueOrDie(Tensor::Empty({1, 7, 32}, DType::kF32));
  ASSERT_TRUE((*model)->Forward(got, tokens).ok());
  ASSERT_TRUE(reference->Forward(want, tokens).ok());
  EXPECT_EQ(ValueOrDie(got.ToFloatVector()), ValueOrDie(want.ToFloatVector()));
}

TEST(GenerateMainTest, Usage) {
  EXPECT_EQ(RecipeMain(GenerateRecipe(), {}), 2);
  EXPECT_EQ(RecipeMain(GenerateRecipe(), {"--config"}), 2);
  EXPECT_EQ(RecipeMain(GenerateRecipe(), {"--help"}), 0);
  EXPECT_EQ(RecipeMain(GenerateRecipe(), {"--config", "/no/such.yaml"}), 1);
}

}  // namespace
}  // namespace cctune
