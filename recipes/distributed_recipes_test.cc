// full_finetune_distributed and lora_finetune_distributed on 2 ranks (cctune_mpi_test: mpirun
// -np 2, one thread each), run in-process on every rank through RecipeMain, against the
// single-device recipes with the same global batch (run by rank 0 alone), against
// themselves (bit-identical reruns and resumes), and across world sizes (2 -> 1 and 1 -> 2:
// rank 0 runs the one-rank part with the launcher's variables hidden, a world of one).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/hf.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "recipes/full_finetune_distributed.h"
#include "recipes/full_finetune_single_device.h"
#include "recipes/lora_finetune_distributed.h"
#include "recipes/lora_finetune_single_device.h"
#include "recipes/recipe_main.h"
#include "tests/recipe_test_util.h"
#include "training/recipe_state.h"

namespace cctune {
namespace {

namespace fs = std::filesystem;
using testing::ExpectSameFiles;
using testing::ExpectSameLog;
using testing::LogLine;
using testing::ReadLog;

int Rank() {
  const char* r = std::getenv("OMPI_COMM_WORLD_RANK");
  return r == nullptr ? 0 : std::atoi(r);
}

int WorldSize() {
  const char* n = std::getenv("OMPI_COMM_WORLD_SIZE");
  return n == nullptr ? 1 : std::atoi(n);
}

std::string Dir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/dist_recipes/", name);
  fs::create_directories(dir);
  return dir;
}

// Hides the launcher's variables for its lifetime: this process is then a world of one.
class WorldOfOne {
 public:
  WorldOfOne() {
    for (const char* v : kVars) {
      if (const char* value = std::getenv(v)) saved_[v] = value;
      unsetenv(v);
    }
  }
  ~WorldOfOne() {
    for (const auto& [k, v] : saved_) setenv(k.c_str(), v.c_str(), 1);
  }

 private:
  static constexpr const char* kVars[] = {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                                          "OMPI_COMM_WORLD_LOCAL_RANK",
                                          "OMPI_COMM_WORLD_LOCAL_SIZE"};
  std::map<std::string, std::string> saved_;
};

// 64 samples; a step is 16 samples: 2 micro-batches of 4 per rank on 2 ranks, of 8 on one.
std::string FullYaml(const std::string& out) {
  return testing::TinyFullFinetuneYaml(out, 64, 2);
}

std::string LoRAYaml(const std::string& out) {
  return absl::StrCat("output_dir: ", out, "\n",
                      testing::TinyModelYaml("cctune.models.tiny.lora_tiny_llama", R"(
  lora_attn_modules: ['q_proj', 'v_proj', 'output_proj']
  apply_lora_to_mlp: true
  apply_lora_to_output: false
  lora_rank: 4
  lora_alpha: 8
  lora_dropout: 0.0
)"),
                      testing::ByteTokenizerYaml(32), testing::SyntheticDatasetYaml(64, 5), R"(seed: 7
shuffle: true
batch_size: 8
epochs: 2
gradient_accumulation_steps: 2
clip_grad_norm: 1.0
optimizer:
  _component_: torch.optim.AdamW
  lr: 0.01
loss:
  _component_: torchtune.modules.loss.CEWithChunkedOutputLoss
)",
                      testing::JsonlLoggerYaml(), R"(log_every_n_steps: 1
dtype: fp32
device: cpu
)");
}

// Runs `entry` on config `yaml` for output dir Dir(name) with `overrides`; its exit code.
// Each rank writes its own copy of the config.
int RunRecipe(const RecipeEntry& entry, const std::string& name,
        std::string (*yaml)(const std::string&), std::vector<std::string> overrides = {}) {
  const std::string out = Dir(name);
  const std::string config = absl::StrCat(Dir("configs"), "/", name, "_rank", Rank(), ".yaml");
  {
    std::FILE* f = std::fopen(config.c_str(), "w");
    const std::string text = yaml(out);
    std::fwrite(text.data(), 1, text.size(), f);
    std::fclose(f);
  }
  std::vector<std::string> args = {"--config", config};
  args.insert(args.end(), overrides.begin(), overrides.end());
  return RecipeMain(entry, args);
}

std::string Log(const std::string& name) { return Dir(name) + "/logs/metrics.jsonl"; }

void ExpectLossesNear(const std::vector<LogLine>& got, const std::vector<LogLine>& want,
                      double rel) {
  ASSERT_EQ(got.size(), want.size());
  ASSERT_FALSE(got.empty());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].step, want[i].step);
    EXPECT_NEAR(got[i].loss, want[i].loss, rel * std::fabs(want[i].loss)) << "step " << got[i].step;
    EXPECT_NEAR(got[i].grad_norm, want[i].grad_norm, 1e-5 * std::fabs(want[i].grad_norm))
        << "step " << got[i].step;
  }
}

// Every tensor of checkpoint folder `got` within `tol` of the same one in `want` (relative to
// the larger magnitude with `relative`).
void ExpectWeightsNear(const std::string& got, const std::string& want, double tol,
                       bool relative = false) {
  HfLoadOptions options;
  options.dtype = DType::kF32;
  auto a = LoadHfCheckpoint(got, options);
  auto b = LoadHfCheckpoint(want, options);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(a->state_dict.size(), b->state_dict.size());
  for (const auto& [name, t] : b->state_dict) {
    ASSERT_EQ(a->state_dict.count(name), 1u) << name;
    const std::vector<float> x = *a->state_dict.at(name).ToFloatVector();
    const std::vector<float> y = *t.ToFloatVector();
    ASSERT_EQ(x.size(), y.size()) << name;
    float worst = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const float scale = relative ? std::fmax(std::fabs(x[i]), std::fabs(y[i])) : 1.0f;
      worst = std::fmax(worst, std::fabs(x[i] - y[i]) / (scale > 0 ? scale : 1.0f));
    }
    EXPECT_LE(worst, tol) << name;
  }
}

const std::vector<std::string> kPerRank2 = {"batch_size=4"};

TEST(FullFinetuneDistributedTest, TwoRanksAreTheSingleDeviceRunFp32) {
  ASSERT_EQ(RunRecipe(FullFinetuneDistributedRecipe(), "fp32_2", FullYaml, kPerRank2), 0);
  if (Rank() != 0) return;
  ASSERT_EQ(RunRecipe(FullFinetuneRecipe(), "fp32_1", FullYaml), 0);
  ExpectLossesNear(ReadLog(Log("fp32_2")), ReadLog(Log("fp32_1")), 1e-6);
  EXPECT_EQ(ReadLog(Log("fp32_2")).size(), 8u);
  ExpectWeightsNear(Dir("fp32_2") + "/step_8", Dir("fp32_1") + "/step_8", 1e-5);

  // Each rank holds half of the optimizer state (the buffer padded to an even length).
  auto whole = LoadRecipeState(Dir("fp32_1") + "/step_8/recipe_state.safetensors");
  ASSERT_TRUE(whole.ok()) << whole.status();
  for (int r = 0; r < 2; ++r) {
    auto shard = LoadRecipeState(
        absl::StrCat(Dir("fp32_2"), "/step_8/", OptimizerShardFile(r, 2)));
    ASSERT_TRUE(shard.ok()) << shard.status();
    // Per-layer units: every unit's shard is half the unit, and the units tile the buffer.
    int64_t whole_numel = 0, shard_numel = 0;
    for (const auto& [name, t] : whole->tensors) whole_numel += t.numel();
    for (const auto& [name, t] : shard->tensors) shard_numel += t.numel();
    EXPECT_GT(whole_numel, 0);
    EXPECT_EQ(2 * shard_numel, whole_numel) << "rank " << r;
  }
}

TEST(FullFinetuneDistributedTest, TwoRanksAreTheSingleDeviceRunBf16) {
  ASSERT_EQ(RunRecipe(FullFinetuneDistributedRecipe(), "bf16_2", FullYaml, {"batch_size=4", "dtype=bf16"}),
            0);
  if (Rank() != 0) return;
  ASSERT_EQ(RunRecipe(FullFinetuneRecipe(), "bf16_1", FullYaml, {"dtype=bf16"}), 0);
  ExpectLossesNear(ReadLog(Log("bf16_2")), ReadLog(Log("bf16_1")), 1e-6);
  // The weights are the optimizer's f32 master copies (the two ranks' shards end to end)
  // within 1e-5; their bf16 roundings, which the checkpoints store, within one bf16 step
  // (2^-7 of the magnitude at most; a
  // master a hair's breadth from a rounding boundary may round the other way).
  auto whole = LoadRecipeState(Dir("bf16_1") + "/step_8/recipe_state.safetensors");
  ASSERT_TRUE(whole.ok()) << whole.status();
  // The per-layer units' shards, unit by unit and rank by rank, tile the buffer.
  std::vector<RecipeState> shards;
  for (int r = 0; r < 2; ++r) {
    auto shard =
        LoadRecipeState(absl::StrCat(Dir("bf16_2"), "/step_8/", OptimizerShardFile(r, 2)));
    ASSERT_TRUE(shard.ok()) << shard.status();
    shards.push_back(std::move(*shard));
  }
  std::vector<float> sharded;
  for (int u = 0;; ++u) {
    const std::string name = absl::StrCat("optimizer.unit", u, "_bf16.master");
    if (shards[0].tensors.count(name) == 0) break;
    for (const RecipeState& shard : shards) {
      const std::vector<float> part = *shard.tensors.at(name).ToFloatVector();
      sharded.insert(sharded.end(), part.begin(), part.end());
    }
  }
  const std::vector<float> master =
      *whole->tensors.at("optimizer.buffer0_bf16.master").ToFloatVector();
  ASSERT_GE(sharded.size(), master.size());
  float worst = 0;
  for (size_t i = 0; i < master.size(); ++i) {
    worst = std::fmax(worst, std::fabs(sharded[i] - master[i]));
  }
  EXPECT_LE(worst, 1e-5);
  ExpectWeightsNear(Dir("bf16_2") + "/step_8", Dir("bf16_1") + "/step_8", 1.0 / 128,
                    /*relative=*/true);
}

// The same config with a validation set evaluated every 4 steps.
std::string FullYamlWithValidation(const std::string& out) {
  return FullYaml(out) + R"(validation_dataset:
  _component_: cctune.data.synthetic_arithmetic
  num_samples: 16
  seed: 5
  first_index: 100000
eval_every_n_steps: 4
)";
}

// fsdp_reshard_after_forward: false (the gathered layers kept from the forward to the
// backward) with activation checkpointing and validation (every rank evaluates, the weights
// gathered layer by layer): still the single-device run.
TEST(FullFinetuneDistributedTest, NoReshardAfterForwardWithCheckpointingAndValidation) {
  ASSERT_EQ(RunRecipe(FullFinetuneDistributedRecipe(), "keep_2", FullYamlWithValidation,
                      {"batch_size=4", "fsdp_reshard_after_forward=false",
                       "enable_activation_checkpointing=true"}),
            0);
  if (Rank() != 0) return;
  ASSERT_EQ(RunRecipe(FullFinetuneRecipe(), "keep_1", FullYamlWithValidation,
                      {"enable_activation_checkpointing=true"}),
            0);
  ExpectLossesNear(ReadLog(Log("keep_2")), ReadLog(Log("keep_1")), 1e-6);
  ExpectWeightsNear(Dir("keep_2") + "/step_8", Dir("keep_1") + "/step_8", 1e-5);
  // The validation losses too (lines with val_loss).
  const std::string a = testing::ReadFile(Log("keep_2")), b = testing::ReadFile(Log("keep_1"));
  EXPECT_NE(a.find("val_loss"), std::string::npos);
  EXPECT_EQ(std::count(a.begin(), a.end(), '\n'), std::count(b.begin(), b.end(), '\n'));
}

TEST(FullFinetuneDistributedTest, TwoRunsAreBitIdentical) {
  ASSERT_EQ(RunRecipe(FullFinetuneDistributedRecipe(), "again_a", FullYaml, kPerRank2), 0);
  ASSERT_EQ(RunRecipe(FullFinetuneDistributedRecipe(), "again_b", FullYaml, kPerRank2), 0);
  if (Rank() != 0) return;
  ExpectSameLog(ReadLog(Log("again_b")), ReadLog(Log("again_a")));
  ExpectSameFiles(Dir("again_b") + "/step_8", Dir("again_a") + "/step_8",
                  {"model.safetensors", OptimizerShardFile(0, 2), OptimizerShardFile(1, 2)});
}

TEST(FullFinetuneDistributedTest, ResumeAtTheSameWorldSizeIsBitIdentical) {
  ASSERT_EQ(RunRecipe(FullFinetuneDistributedRecipe(), "whole", FullYaml, kPerRank2), 0);
  std::vector<std::string> stop = kPerRank2;
  stop.push_back("stop_after_steps=3");
  ASSERT_EQ(RunRecipe(FullFinetuneDistributedRecipe(), "resumed", FullYaml, stop), 0);
  std::vector<std::string> resume = kPerRank2;
  resume.push_back("resume_from_checkpoint=true");
  ASSERT_EQ(RunRecipe(FullFinetuneDistributedRecipe(), "resumed", FullYaml, resume), 0);
  if (Rank() != 0) return;
  ExpectSameLog(ReadLog(Log("resumed")), ReadLog(Log("whole")));
  ExpectSameFiles(Dir("resumed") + "/step_8", Dir("whole") + "/step_8",
                  {"model.safetensors", OptimizerShardFile(0, 2), OptimizerShardFile(1, 2)});
}

// Stopped on 2 ranks, resumed on 1 with the same global batch (the optimizer state
// resharded): within 1e-6 of the uninterrupted single-device run.
TEST(FullFinetuneDistributedTest, ResumeFromTwoRanksToOne) {
  ASSERT_EQ(RunRecipe(FullFinetuneDistributedRecipe(), "two_to_one", FullYaml,
                {"batch_size=4", "stop_after_steps=3"}),
            0);
  if (Rank() != 0) return;
  WorldOfOne one;
  ASSERT_EQ(RunRecipe(FullFinetuneDistributedRecipe(), "two_to_one", FullYaml,
                {"resume_from_checkpoint=true"}),
            0);
  ASSERT_EQ(RunRecipe(FullFinetuneRecipe(), "reference_1", FullYaml), 0);
  ExpectLossesNear(ReadLog(Log("two_to_one")), ReadLog(Log("reference_1")), 1e-6);
  ExpectWeightsNear(Dir("two_to_one") + "/step_8", Dir("reference_1") + "/step_8", 1e-5);
}

// Stopped on 1 rank, resumed on 2: rank 1 waits in the group's creation meanwhile.
TEST(FullFinetuneDistributedTest, ResumeFromOneRankToTwo) {
  if (Rank() == 0) {
    WorldOfOne one;
    ASSERT_EQ(RunRecipe(FullFinetuneDistributedRecipe(), "one_to_two", FullYaml, {"stop_after_steps=3"}),
              0);
  }
  ASSERT_EQ(RunRecipe(FullFinetuneDistributedRecipe(), "one_to_two", FullYaml,
                {"batch_size=4", "resume_from_checkpoint=true"}),
            0);
  if (Rank() != 0) return;
  ASSERT_EQ(RunRecipe(FullFinetuneRecipe(), "reference_2", FullYaml), 0);
  ExpectLossesNear(ReadLog(Log("one_to_two")), ReadLog(Log("reference_2")), 1e-6);
  ExpectWeightsNear(Dir("one_to_two") + "/step_8", Dir("reference_2") + "/step_8", 1e-5);
}

// Tied embeddings (Llama 3.2's): the table's unit is gathered again for the output projection
// and its gradient, from both uses, reduce-scattered after the table's backward.
TEST(FullFinetuneDistributedTest, TiedEmbeddingsAreTheSingleDeviceRun) {
  ASSERT_EQ(RunRecipe(FullFinetuneDistributedRecipe(), "tied_2", FullYaml,
                      {"batch_size=4", "model.tie_word_embeddings=true"}),
            0);
  if (Rank() != 0) return;
  ASSERT_EQ(RunRecipe(FullFinetuneRecipe(), "tied_1", FullYaml, {"model.tie_word_embeddings=true"}),
            0);
  ExpectLossesNear(ReadLog(Log("tied_2")), ReadLog(Log("tied_1")), 1e-6);
  ExpectWeightsNear(Dir("tied_2") + "/step_8", Dir("tied_1") + "/step_8", 1e-5);
}

// Packed samples (packs of the tokenizer's 32 tokens, each with its mask and positions): the
// ranks shard the packs; still the single-device run.
TEST(FullFinetuneDistributedTest, PackedDatasetIsTheSingleDeviceRun) {
  const std::vector<std::string> packed = {"dataset.packed=true", "dataset.num_samples=256",
                                           "epochs=1", "max_steps_per_epoch=3"};
  std::vector<std::string> two = packed;
  two.push_back("batch_size=4");
  ASSERT_EQ(RunRecipe(FullFinetuneDistributedRecipe(), "packed_2", FullYaml, two), 0);
  if (Rank() != 0) return;
  ASSERT_EQ(RunRecipe(FullFinetuneRecipe(), "packed_1", FullYaml, packed), 0);
  ExpectLossesNear(ReadLog(Log("packed_2")), ReadLog(Log("packed_1")), 1e-6);
  EXPECT_EQ(ReadLog(Log("packed_2")).size(), 3u);
  ExpectWeightsNear(Dir("packed_2") + "/step_3", Dir("packed_1") + "/step_3", 1e-5);
}

// global_batch_size splits over the ranks and micro-batches (16 = 2 ranks x 2 x 4), or is an
// error before any step.
TEST(FullFinetuneDistributedTest, GlobalBatchSizeSplitsOrFails) {
  ASSERT_EQ(RunRecipe(FullFinetuneDistributedRecipe(), "global_2", FullYaml,
                      {"global_batch_size=16"}),
            0);
  EXPECT_NE(RunRecipe(FullFinetuneDistributedRecipe(), "global_bad", FullYaml,
                      {"global_batch_size=10"}),
            0);
  EXPECT_FALSE(fs::exists(Dir("global_bad") + "/LATEST"));
  if (Rank() != 0) return;
  EXPECT_FALSE(fs::exists(Dir("global_bad") + "/logs/metrics.jsonl"));
  ASSERT_EQ(RunRecipe(FullFinetuneRecipe(), "global_1", FullYaml), 0);
  ExpectLossesNear(ReadLog(Log("global_2")), ReadLog(Log("global_1")), 1e-6);
}

// seed: null: every rank takes rank 0's seed (saved in the recipe state): the run is the
// single-device run with that seed.
TEST(FullFinetuneDistributedTest, ANullSeedIsRankZeros) {
  ASSERT_EQ(RunRecipe(FullFinetuneDistributedRecipe(), "null_seed_2", FullYaml,
                      {"batch_size=4", "seed=null"}),
            0);
  if (Rank() != 0) return;
  auto state = LoadRecipeState(Dir("null_seed_2") + "/step_8/recipe_state.safetensors");
  ASSERT_TRUE(state.ok()) << state.status();
  ASSERT_EQ(RunRecipe(FullFinetuneRecipe(), "null_seed_1", FullYaml,
                      {absl::StrCat("seed=", static_cast<int64_t>(state->proto.seed()))}),
            0);
  ExpectLossesNear(ReadLog(Log("null_seed_2")), ReadLog(Log("null_seed_1")), 1e-6);
}

TEST(FullFinetuneDistributedTest, ADatasetSmallerThanTheWorldFailsBeforeAnyStep) {
  EXPECT_NE(RunRecipe(FullFinetuneDistributedRecipe(), "tiny_data", FullYaml,
                {"batch_size=1", "gradient_accumulation_steps=1", "dataset.num_samples=1"}),
            0);
  EXPECT_FALSE(fs::exists(Dir("tiny_data") + "/LATEST"));
}

// 3 ranks (//recipes:distributed_recipes_3_ranks_test): 3 divides no per-layer unit (they
// start on 32-element boundaries), so every unit is cut unevenly (the last rank's shard
// shorter, the collectives' chunks padded); still the single-device run with the same global
// batch (12 = 3 x 4), a resume at 3 ranks is bit-identical, and one from 3 ranks to 1 (the
// uneven optimizer shards resharded) is within 1e-6 of the single-device run.
TEST(ThreeRanksTest, UnevenPerLayerShardingIsTheSingleDeviceRun) {
  if (WorldSize() != 3) GTEST_SKIP() << "runs on 3 ranks";
  ASSERT_EQ(RunRecipe(FullFinetuneDistributedRecipe(), "three_3", FullYaml, {"batch_size=4"}), 0);
  ASSERT_EQ(RunRecipe(FullFinetuneDistributedRecipe(), "three_resumed", FullYaml,
                      {"batch_size=4", "stop_after_steps=1"}),
            0);
  ASSERT_EQ(RunRecipe(FullFinetuneDistributedRecipe(), "three_resumed", FullYaml,
                      {"batch_size=4", "resume_from_checkpoint=true"}),
            0);
  ASSERT_EQ(RunRecipe(FullFinetuneDistributedRecipe(), "three_to_one", FullYaml,
                      {"batch_size=4", "stop_after_steps=3"}),
            0);
  if (Rank() != 0) return;
  ASSERT_EQ(RunRecipe(FullFinetuneRecipe(), "three_1", FullYaml, {"batch_size=12"}), 0);
  EXPECT_EQ(ReadLog(Log("three_3")).size(), 4u);
  ExpectLossesNear(ReadLog(Log("three_3")), ReadLog(Log("three_1")), 1e-6);
  ExpectWeightsNear(Dir("three_3") + "/step_4", Dir("three_1") + "/step_4", 1e-5);
  ExpectSameLog(ReadLog(Log("three_resumed")), ReadLog(Log("three_3")));
  ExpectSameFiles(Dir("three_resumed") + "/step_4", Dir("three_3") + "/step_4",
                  {"model.safetensors", OptimizerShardFile(0, 3), OptimizerShardFile(1, 3),
                   OptimizerShardFile(2, 3)});
  WorldOfOne one;
  ASSERT_EQ(RunRecipe(FullFinetuneDistributedRecipe(), "three_to_one", FullYaml,
                      {"batch_size=12", "resume_from_checkpoint=true"}),
            0);
  ExpectLossesNear(ReadLog(Log("three_to_one")), ReadLog(Log("three_1")), 1e-6);
  ExpectWeightsNear(Dir("three_to_one") + "/step_4", Dir("three_1") + "/step_4", 1e-5);
}

TEST(LoRAFinetuneDistributedTest, TwoRanksAreTheSingleDeviceRun) {
  ASSERT_EQ(RunRecipe(LoRAFinetuneDistributedRecipe(), "lora_2", LoRAYaml, kPerRank2), 0);
  if (Rank() != 0) return;
  ASSERT_EQ(RunRecipe(LoRAFinetuneRecipe(), "lora_1", LoRAYaml), 0);
  ExpectLossesNear(ReadLog(Log("lora_2")), ReadLog(Log("lora_1")), 1e-6);
  ExpectWeightsNear(Dir("lora_2") + "/step_8", Dir("lora_1") + "/step_8", 1e-5);
}

// fsdp_shard_frozen_base: the base weights sharded per layer (gathered before each layer's
// forward and backward, the adapters kept resident) give the very run of the replicated base:
// the gathered weights are the same bits.
TEST(LoRAFinetuneDistributedTest, ShardedFrozenBaseIsTheReplicatedRun) {
  std::vector<std::string> sharded = kPerRank2;
  sharded.push_back("fsdp_shard_frozen_base=true");
  ASSERT_EQ(RunRecipe(LoRAFinetuneDistributedRecipe(), "lora_2_sharded", LoRAYaml, sharded), 0);
  ASSERT_EQ(RunRecipe(LoRAFinetuneDistributedRecipe(), "lora_2_replicated", LoRAYaml, kPerRank2), 0);
  if (Rank() != 0) return;
  ExpectSameLog(ReadLog(Log("lora_2_sharded")), ReadLog(Log("lora_2_replicated")));
  ExpectSameFiles(Dir("lora_2_sharded") + "/step_8", Dir("lora_2_replicated") + "/step_8",
                  {"adapter_model.safetensors", "model.safetensors"});
}

}  // namespace
}  // namespace cctune
