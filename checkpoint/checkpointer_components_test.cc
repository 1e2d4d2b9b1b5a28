#include "checkpoint/checkpointer_components.h"

#include <cmath>
#include <fstream>
#include <vector>

#include "config/config.h"
#include "generation/model_loader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/tiny/tiny.h"
#include "tests/llama2c_fixture.h"
#include "tests/subprocess.h"

namespace cctune {
namespace {

using ::testing::HasSubstr;

std::string Assets() { return testing::RunfilePath("tests/assets/checkpoint"); }

absl::StatusOr<LoadedCheckpoint> Load(const std::string& yaml,
                                      const CheckpointLoadOptions& options = {}) {
  CCTUNE_CHECK_OK(RegisterCheckpointers());
  absl::StatusOr<Config> cfg = Config::FromString(yaml, "ck.yaml");
  CCTUNE_CHECK_OK(cfg);
  CCTUNE_ASSIGN_OR_RETURN(std::unique_ptr<Checkpointer> ck,
                          CheckpointerRegistry().InstantiateKey(cfg->root(), "checkpointer"));
  return ck->LoadCheckpoint(options);
}

std::string HfYaml(const std::string& dir, const std::string& model_type = "LLAMA2") {
  return "checkpointer:\n  _component_: torchtune.training.FullModelHFCheckpointer\n"
         "  checkpoint_dir: " + Assets() + "/" + dir +
         "\n  checkpoint_files: [model.safetensors]\n  model_type: " + model_type + "\n";
}

// Logits [1, 7, 32] of the asset models (vocab 32, 2 layers, 4/2 heads, hidden 16) for a
// fixed prompt, with the weights loaded as given.
std::vector<float> Logits(TransformerDecoder& model) {
  const std::vector<int32_t> ids = {1, 5, 31, 7, 0, 19, 4};
  Tensor tokens = ValueOrDie(Tensor::FromVector(ids, {1, 7}));
  Tensor logits = ValueOrDie(Tensor::Empty({1, 7, 32}, DType::kF32));
  CCTUNE_CHECK_OK(model.Forward(logits, tokens));
  return ValueOrDie(logits.ToFloatVector());
}

// The attention scores q.k are invariant to one permutation of both q's and k's head dims:
// HF q/k rows as stored with half-split RoPE give the permuted rows' logits with interleaved
// RoPE, and loading them is zero-copy (every parameter views the mapped file).
TEST(HfCheckpointerTest, KeptQkLayoutWithHalfSplitRopeMatchesThePermutedLoad) {
  for (const char* dir : {"tiny_llama", "tiny_llama_sharded"}) {
    SCOPED_TRACE(dir);
    const std::string yaml =
        std::string(dir) == "tiny_llama"
            ? HfYaml(dir)
            : "checkpointer:\n  _component_: torchtune.training.FullModelHFCheckpointer\n"
              "  checkpoint_dir: " + Assets() + "/" + dir +
              "\n  checkpoint_files:\n    filename_format: model-{}-of-{}.safetensors\n"
              "    max_filename: \"00003\"\n  model_type: LLAMA3\n";
    LoadedCheckpoint permuted = ValueOrDie(Load(yaml));
    EXPECT_FALSE(permuted.qk_half_split);
    auto reference = ValueOrDie(TinyLlama(32, 2, 4, 2, 16, 24, 64));
    ParameterArena ref_arena =
        ValueOrDie(LoadWeights(*reference, permuted.state_dict, DType::kF32, Device::Cpu()));
    EXPECT_EQ(ref_arena.viewed_bytes(), 0u);
    const std::vector<float> want = Logits(*reference);

    CheckpointLoadOptions keep;
    keep.keep_qk_layout = true;
    LoadedCheckpoint kept = ValueOrDie(Load(yaml, keep));
    EXPECT_TRUE(kept.qk_half_split);
    auto model = ValueOrDie(TinyLlama(32, 2, 4, 2, 16, 24, 64));
    ASSERT_TRUE(UseHalfSplitRope(*model));
    EXPECT_EQ(model->layer(1).attn().pos_embeddings()->pairing(), ops::RopePairing::kHalfSplit);
    ParameterArena arena = ValueOrDie(LoadWeights(*model, kept.state_dict, DType::kF32,
                                                  Device::Cpu(), /*view_checkpoint=*/true));
    size_t weight_bytes = 0;
    for (const auto& [name, t] : arena.named_tensors()) {
      weight_bytes += t.nbytes();
      const Tensor& src = kept.state_dict.at(name);
      ASSERT_TRUE(src.storage()->file_mapped()) << name;
      const char* begin = static_cast<const char*>(src.storage()->data());
      const char* p = static_cast<const char*>(t.raw_data());
      EXPECT_TRUE(t.SharesStorageWith(src) && p >= begin &&
                  p + t.nbytes() <= begin + src.storage()->bytes())
          << name << " does not view the mapped file";
    }
    EXPECT_EQ(arena.viewed_bytes(), weight_bytes);
    EXPECT_TRUE(arena.buffers().empty());
    kept = LoadedCheckpoint();  // the arena keeps the mappings alive
    const std::vector<float> got = Logits(*model);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_NEAR(got[i], want[i], 1e-5f * (1.0f + std::abs(want[i]))) << i;
    }

    // The same weights copied (the arena's own buffers, q/k/v back to back and so one fused
    // GEMM) give the same logits to the bit: each output is the same dot product either way.
    LoadedCheckpoint kept_again = ValueOrDie(Load(yaml, keep));
    auto copied = ValueOrDie(TinyLlama(32, 2, 4, 2, 16, 24, 64));
    ASSERT_TRUE(UseHalfSplitRope(*copied));
    ParameterArena copy_arena =
        ValueOrDie(LoadWeights(*copied, kept_again.state_dict, DType::kF32, Device::Cpu()));
    EXPECT_EQ(copy_arena.viewed_bytes(), 0u);
    const std::vector<float> copied_logits = Logits(*copied);
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(copied_logits[i], got[i]) << i;
    }
  }
}

TEST(HfCheckpointerTest, KeepQkLayoutChangesNothingForQwen2OrAHalfSplitModel) {
  CheckpointLoadOptions keep;
  keep.keep_qk_layout = true;
  // Qwen2 is never permuted: the model rotates half-split pairs already.
  LoadedCheckpoint qwen = ValueOrDie(Load(HfYaml("tiny_llama", "QWEN2"), keep));
  EXPECT_FALSE(qwen.qk_half_split);
  // A model that rotates half-split pairs of its own accord cannot take unpermuted weights.
  auto model = ValueOrDie(TinyLlama(32, 2, 4, 2, 16, 24, 64));
  ASSERT_TRUE(UseHalfSplitRope(*model));
  EXPECT_FALSE(UseHalfSplitRope(*model));
}

TEST(HfCheckpointerTest, LoadsIntoAMatchingModel) {
  auto ck = Load(
      "checkpointer:\n  _component_: torchtune.training.FullModelHFCheckpointer\n"
      "  checkpoint_dir: " +
      Assets() +
      "/tiny_llama\n"
      "  checkpoint_files: [model.safetensors]\n  model_type: LLAMA2\n"
      "  output_dir: /tmp\n");
  ASSERT_TRUE(ck.ok()) << ck.status();
  EXPECT_EQ(ck->state_dict.count("layers.1.attn.q_proj.weight"), 1u);
  // Only where config.json lies, for cctune.models.from_config_json.
  EXPECT_EQ(ck->model_args.Keys(),
            (std::vector<std::string>{"checkpoint_dir", "checkpoint_model_type"}));
  // config.json: vocab 32, 2 layers, 4/2 heads, hidden 16, intermediate 24, 64 positions.
  auto model = ValueOrDie(TinyLlama(32, 2, 4, 2, 16, 24, 64));
  EXPECT_TRUE(LoadWeights(*model, ck->state_dict, DType::kF32, Device::Cpu()).ok());
}

TEST(HfCheckpointerTest, ShardedWithFilenameFormatAndOldSpelling) {
  auto ck = Load(
      "checkpointer:\n  _component_: torchtune.utils.FullModelHFCheckpointer\n"
      "  checkpoint_dir: " +
      Assets() +
      "/tiny_llama_sharded\n"
      "  checkpoint_files:\n    filename_format: model-{}-of-{}.safetensors\n"
      "    max_filename: \"00003\"\n  model_type: LLAMA3\n");
  ASSERT_TRUE(ck.ok()) << ck.status();
  EXPECT_EQ(ck->files.size(), 3u);
}

// The torchtune keys whose behaviour is not implemented are errors naming the key and value
// when a config asks for it, never silently dropped; their defaults load.
TEST(HfCheckpointerTest, UnsupportedKeysAreRejected) {
  const std::string base =
      "checkpointer:\n  _component_: cctune.training.FullModelHFCheckpointer\n"
      "  checkpoint_dir: " +
      Assets() + "/tiny_llama\n  checkpoint_files: [model.safetensors]\n  model_type: LLAMA2\n";
  ASSERT_TRUE(Load(base + "  recipe_checkpoint: null\n  safe_serialization: true\n"
                          "  should_load_recipe_state: false\n  resume_from_checkpoint: false\n")
                  .ok());
  const std::pair<std::string, std::string> cases[] = {
      {"  recipe_checkpoint: recipe_state.pt\n", "checkpointer.recipe_checkpoint: 'recipe_state.pt'"},
      {"  adapter_checkpoint: adapter.pt\n", "checkpointer.adapter_checkpoint: 'adapter.pt'"},
      {"  safe_serialization: false\n", "checkpointer.safe_serialization: false"},
      {"  should_load_recipe_state: true\n", "checkpointer.should_load_recipe_state: true"},
      {"  resume_from_checkpoint: true\n", "checkpointer.resume_from_checkpoint: true"},
  };
  for (const auto& [line, message] : cases) {
    absl::StatusOr<LoadedCheckpoint> ck = Load(base + line);
    EXPECT_EQ(ck.status().code(), absl::StatusCode::kUnimplemented) << line;
    EXPECT_THAT(std::string(ck.status().message()), HasSubstr(message)) << line;
  }
}

TEST(HfCheckpointerTest, Errors) {
  const std::string head =
      "checkpointer:\n  _component_: cctune.training.FullModelHFCheckpointer\n";
  auto ck = Load(head + "  checkpoint_dir: " + Assets() +
                 "/tiny_llama\n"
                 "  checkpoint_files: [pytorch_model.bin]\n  model_type: LLAMA2\n");
  ASSERT_FALSE(ck.ok());
  EXPECT_THAT(std::string(ck.status().message()), HasSubstr("pytorch_model.bin' does not exist"));
  ck = Load(head +
            "  checkpoint_dir: /no/such/dir\n  checkpoint_files: [model.safetensors]\n"
            "  model_type: LLAMA2\n");
  ASSERT_FALSE(ck.ok());
  EXPECT_THAT(std::string(ck.status().message()),
              HasSubstr("checkpoint directory '/no/such/dir' does not exist"));
  ck = Load(head + "  checkpoint_dir: " + Assets() +
            "/tiny_llama\n"
            "  checkpoint_files: [model.safetensors]\n  model_type: GPT2\n");
  ASSERT_FALSE(ck.ok());
  EXPECT_THAT(std::string(ck.status().message()), HasSubstr("model_type"));
  // A pickle file that exists is refused by name.
  const std::string dir = testing::TestTempDir("hf_bin");
  std::ofstream(dir + "/pytorch_model.bin") << "x";
  ck = Load(head + "  checkpoint_dir: " + dir +
            "\n  checkpoint_files: [pytorch_model.bin]\n"
            "  model_type: LLAMA2\n");
  ASSERT_FALSE(ck.ok());
  EXPECT_THAT(std::string(ck.status().message()), HasSubstr("only safetensors"));
}

TEST(Llama2cCheckpointerTest, HeaderGivesModelArguments) {
  const std::string dir = testing::TestTempDir("llama2c_ck");
  ASSERT_TRUE(testing::WriteLlama2cFixture(dir).ok());
  auto ck = Load(
      "checkpointer:\n  _component_: cctune.training.Llama2cCheckpointer\n"
      "  checkpoint_dir: " +
      dir + "\n  checkpoint_files: [model.bin]\n");
  ASSERT_TRUE(ck.ok()) << ck.status();
  EXPECT_EQ(ck->model_args.Child("dim")->int_value(), 32);
  EXPECT_EQ(ck->model_args.Child("n_kv_heads")->int_value(), 2);
  EXPECT_EQ(ck->model_args.Child("vocab_size")->int_value(), 300);
  EXPECT_EQ(ck->model_args.Child("seq_len")->int_value(), 64);
  auto two = Load(
      "checkpointer:\n  _component_: cctune.training.Llama2cCheckpointer\n"
      "  checkpoint_dir: " +
      dir + "\n  checkpoint_files: [model.bin, tok.bin]\n");
  ASSERT_FALSE(two.ok());
  EXPECT_THAT(std::string(two.status().message()), HasSubstr("one .bin file"));
}

// model_type, when given, must say what a llama2.c .bin is.
TEST(Llama2cCheckpointerTest, ModelTypeIsChecked) {
  const std::string dir = testing::TestTempDir("llama2c_ck_type");
  ASSERT_TRUE(testing::WriteLlama2cFixture(dir).ok());
  const std::string head = "checkpointer:\n  _component_: cctune.training.Llama2cCheckpointer\n"
                           "  checkpoint_dir: " + dir + "\n  checkpoint_files: [model.bin]\n";
  EXPECT_TRUE(Load(head + "  model_type: LLAMA2C\n").ok());
  absl::StatusOr<LoadedCheckpoint> wrong = Load(head + "  model_type: LLAMA3\n");
  ASSERT_FALSE(wrong.ok());
  EXPECT_THAT(std::string(wrong.status().message()), HasSubstr("model_type"));
  EXPECT_THAT(std::string(wrong.status().message()), HasSubstr("LLAMA3"));
}

TEST(CheckCheckpointFilesExistTest, ReportsEachMissingFileAtItsLine) {
  const std::string dir = testing::TestTempDir("ck_files");
  ASSERT_TRUE(testing::WriteLlama2cFixture(dir).ok());
  Config cfg = ValueOrDie(Config::FromString("checkpointer:\n  checkpoint_dir: " + dir +
                                                 "\n  checkpoint_files:\n    - model.bin\n"
                                                 "    - a.bin\n    - b.bin\n",
                                             "ck.yaml"));
  std::vector<ConfigError> errors;
  CheckCheckpointFilesExist(*cfg.Find("checkpointer"), &errors);
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_THAT(errors[0].ToString(), HasSubstr("ck.yaml:5"));
  EXPECT_THAT(errors[0].ToString(), HasSubstr("a.bin' does not exist"));
  EXPECT_THAT(errors[1].ToString(), HasSubstr("ck.yaml:6"));
}

TEST(CheckRecipeCheckpointerTest, ChecksFilesAndOutputDir) {
  const std::string dir = testing::TestTempDir("ck_recipe");
  Config cfg = ValueOrDie(Config::FromString(
      "output_dir: /tmp/run\ncheckpointer:\n  checkpoint_dir: " + dir +
          "\n  checkpoint_files: [model.bin]\n  output_dir: /tmp/other\n",
      "ck.yaml"));
  std::vector<ConfigError> errors;
  CheckRecipeCheckpointer(cfg.root(), &errors);
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_THAT(errors[0].ToString(), HasSubstr("model.bin' does not exist"));
  EXPECT_THAT(errors[1].ToString(), HasSubstr("differs from output_dir '/tmp/run'"));
  errors.clear();
  CheckRecipeCheckpointer(ValueOrDie(Config::FromString("checkpointer: null\n")).root(), &errors);
  EXPECT_TRUE(errors.empty());
}

TEST(CheckCheckpointerOutputDirTest, MustBeTheRecipesOutputDir) {
  auto problems = [](const std::string& yaml) {
    Config cfg = ValueOrDie(Config::FromString(yaml, "ck.yaml"));
    std::vector<ConfigError> errors;
    CheckCheckpointerOutputDir(cfg.root(), &errors);
    return errors;
  };
  EXPECT_TRUE(problems("output_dir: /tmp/run\ncheckpointer:\n  output_dir: /tmp/run/\n").empty());
  EXPECT_TRUE(problems("output_dir: /tmp/run\ncheckpointer:\n  output_dir: /tmp/./run\n").empty());
  EXPECT_TRUE(problems("output_dir: /tmp/run\ncheckpointer:\n  output_dir: null\n").empty());
  EXPECT_TRUE(problems("output_dir: /tmp/run\ncheckpointer:\n  checkpoint_dir: /x\n").empty());
  EXPECT_TRUE(problems("checkpointer:\n  output_dir: /tmp/other\n").empty());  // generation
  EXPECT_TRUE(problems("output_dir: /tmp/run\ncheckpointer: null\n").empty());
  const std::vector<ConfigError> errors =
      problems("output_dir: /tmp/run\ncheckpointer:\n  output_dir: /tmp/other\n");
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_THAT(errors[0].ToString(), HasSubstr("ck.yaml:3"));
  EXPECT_THAT(errors[0].ToString(),
              HasSubstr("checkpointer.output_dir '/tmp/other' differs from output_dir '/tmp/run'"));
}

}  // namespace
}  // namespace cctune
