// The fine-tune skeleton with strategies written here, as DoRA or a distributed recipe
// would plug in (decorating the full or the LoRA strategy): the skeleton calls the hooks in the
// documented order, runs the after-backward hook on every step's gradients (before the norm),
// hands the strategy every checkpoint to write and LATEST's to restore, adds its config checks
// to validation, and ends the run with the hook's error and the last good checkpoint when the
// hook fails; a decorated LoRA strategy keeps LoRA's trainable set and checkpoints.
#include "recipes/finetune_recipe.h"

#include <cmath>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "config/config.h"
#include "core/log.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "recipes/checkpoint_dir.h"
#include "recipes/full_finetune_single_device.h"
#include "recipes/lora_finetune_single_device.h"
#include "tests/llama2c_fixture.h"
#include "tests/recipe_test_util.h"
#include "training/recipe_state.h"
#include "training/train_step.h"

namespace cctune {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// What the strategies of one test saw, hook by hook.
struct Record {
  std::vector<std::string> calls;
  int gradient_calls = 0;
  double last_grad_sq = 0;  // the squared norm the hook saw last
  std::vector<std::string> saved, restored;
  bool fail_backward_after_first = false;
};

// The full fine-tune's strategy, decorated: every hook notes its call and goes on to the full
// strategy's; AfterBackward adds a gradient hook (what a distributed recipe's reduce-scatter
// would be) that notes the squared norm it sees, and fails from the second step on request.
class RecordingStrategy final : public StrategyDecorator {
 public:
  explicit RecordingStrategy(Record* record)
      : StrategyDecorator(MakeFullFinetuneStrategy()), r_(record) {}

  FinetuneRecipeDocs docs() const override {
    FinetuneRecipeDocs d = StrategyDecorator::docs();
    d.name = "recording_finetune";
    return d;
  }
  void Validate(const ConfigNode& root, std::vector<ConfigError>* errors) const override {
    StrategyDecorator::Validate(root, errors);
    if (const ConfigNode* seed = root.Find("seed"); seed != nullptr && seed->text() == "13") {
      ConfigError e;
      e.key = "seed";
      e.message = "the recording strategy refuses seed 13";
      errors->push_back(e);
    }
  }
  absl::Status Configure(const ConfigNode& root) override {
    r_->calls.push_back("Configure");
    return StrategyDecorator::Configure(root);
  }
  absl::StatusOr<std::unique_ptr<TransformerDecoder>> BuildModel(const ConfigNode& root,
                                                                 const ConfigNode& args) override {
    r_->calls.push_back("BuildModel");
    return StrategyDecorator::BuildModel(root, args);
  }
  absl::Status AfterLoad(const TransformerDecoder& model, const ParameterArena& params) override {
    r_->calls.push_back("AfterLoad");
    return StrategyDecorator::AfterLoad(model, params);
  }
  absl::StatusOr<ParameterLayout> TrainableLayout(const TransformerDecoder& model,
                                                  const ParameterArena& params) const override {
    r_->calls.push_back("TrainableLayout");
    return StrategyDecorator::TrainableLayout(model, params);
  }
  void ConfigureTrainer(DecoderTrainerOptions* options) const override {
    r_->calls.push_back("ConfigureTrainer");
    StrategyDecorator::ConfigureTrainer(options);
  }
  absl::StatusOr<std::vector<ParamBuffer>> OptimizerBuffers(
      const ParameterArena& params, const ParameterArena& grads) const override {
    r_->calls.push_back("OptimizerBuffers");
    return StrategyDecorator::OptimizerBuffers(params, grads);
  }
  GradientHook AfterBackward() override {
    r_->calls.push_back("AfterBackward");
    return [r = r_](const std::vector<Tensor>& grads) -> absl::Status {
      if (r->fail_backward_after_first && r->gradient_calls >= 1) {
        return absl::UnavailableError("reduce-scatter: peer 1 is gone");
      }
      ++r->gradient_calls;
      r->last_grad_sq = 0;
      for (const Tensor& g : grads) {
        for (float v : ValueOrDie(g.ToFloatVector())) r->last_grad_sq += double{v} * v;
      }
      return absl::OkStatus();
    };
  }
  absl::Status SaveWeights(const std::string& dir, const ParameterArena& params,
                           const HfModelConfig& config) const override {
    r_->saved.push_back(dir);
    return StrategyDecorator::SaveWeights(dir, params, config);
  }
  absl::Status RestoreWeights(const std::string& dir, const HfModelConfig& config,
                              const ParameterLayout& trainable,
                              ParameterArena& params) const override {
    r_->restored.push_back(dir);
    return StrategyDecorator::RestoreWeights(dir, config, trainable, params);
  }

 private:
  Record* r_;
};

class FinetuneRecipeTest : public ::testing::Test {
 protected:
  FinetuneRecipeTest()
      : dir_(testing::TestTempDir("finetune_recipe")),
        recipe_(MakeFinetuneRecipe([this] { return std::make_unique<RecordingStrategy>(&r_); })) {}

  // The tiny full fine-tune: 32 samples, batch 8 in 2 micro-batches: 2 steps per epoch.
  absl::StatusOr<Config> MakeConfig(const std::string& name,
                                    const std::vector<std::string>& overrides) {
    CCTUNE_ASSIGN_OR_RETURN(
        Config config, Config::FromString(testing::TinyFullFinetuneYaml(Out(name), 32, 1)));
    CCTUNE_RETURN_IF_ERROR(config.ApplyOverrides(overrides));
    return config;
  }
  absl::Status Run(const std::string& name, const std::vector<std::string>& overrides) {
    CCTUNE_ASSIGN_OR_RETURN(Config config, MakeConfig(name, overrides));
    CCTUNE_RETURN_IF_ERROR(config.Resolve());
    return recipe_.run(config);
  }
  std::string Out(const std::string& name) const { return absl::StrCat(dir_, "/", name); }
  // Run `name` with `extra` YAML after the tiny config.
  absl::Status RunWith(const std::string& name, const std::string& extra) {
    CCTUNE_ASSIGN_OR_RETURN(Config config, Config::FromString(absl::StrCat(
                                               testing::TinyFullFinetuneYaml(Out(name), 32, 1),
                                               extra)));
    CCTUNE_RETURN_IF_ERROR(config.Resolve());
    return recipe_.run(config);
  }
  // The val_loss lines of run `name`'s metrics.jsonl.
  std::vector<std::string> ValLines(const std::string& name) const {
    std::vector<std::string> lines;
    std::ifstream in(Out(name) + "/logs/metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
      if (line.find("val_loss") != std::string::npos) lines.push_back(line);
    }
    return lines;
  }

  std::string dir_;
  Record r_;
  RecipeEntry recipe_;
};

TEST_F(FinetuneRecipeTest, CallsTheStrategysHooksInOrder) {
  const absl::Status st = Run("order", {"save_every_n_steps=1"});
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_THAT(r_.calls, ElementsAre("Configure", "BuildModel", "AfterLoad", "TrainableLayout",
                                    "ConfigureTrainer", "OptimizerBuffers", "AfterBackward"));
  EXPECT_EQ(r_.gradient_calls, 2);  // once per step
  EXPECT_GT(r_.last_grad_sq, 0);
  EXPECT_THAT(r_.saved, ElementsAre(Out("order") + "/step_1", Out("order") + "/step_2"));
  EXPECT_TRUE(r_.restored.empty());
  EXPECT_EQ(testing::LatestStep(Out("order")), 2);
  const std::vector<testing::LogLine> log = testing::ReadLog(Out("order") + "/logs/metrics.jsonl");
  ASSERT_EQ(log.size(), 2u);
  // The hook saw the gradients before clipping: their norm is the logged (pre-clip) one.
  EXPECT_NEAR(std::sqrt(r_.last_grad_sq), log[1].grad_norm, 1e-5 * log[1].grad_norm);
}

TEST_F(FinetuneRecipeTest, ResumeHandsLatestToTheStrategy) {
  ASSERT_TRUE(Run("resume", {"stop_after_steps=1"}).ok());
  r_ = Record();
  const absl::Status st = Run("resume", {"resume_from_checkpoint=true"});
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_THAT(r_.restored, ElementsAre(Out("resume") + "/step_1"));
  EXPECT_EQ(r_.gradient_calls, 1);  // step 2 only
  EXPECT_THAT(r_.saved, ElementsAre(Out("resume") + "/step_2"));
}

// seed: null picks a seed, saves it in the recipe state, and a resume with seed: null takes
// the saved one: the stopped and resumed run is the uninterrupted run with that seed.
TEST_F(FinetuneRecipeTest, NullSeedIsChosenSavedAndReusedOnResume) {
  ASSERT_TRUE(Run("null_seed", {"seed=null", "stop_after_steps=1"}).ok());
  absl::StatusOr<RecipeState> state =
      LoadRecipeState(Out("null_seed") + "/step_1/" + kRecipeStateFile);
  ASSERT_TRUE(state.ok()) << state.status();
  const uint64_t seed = state->proto.seed();
  const absl::Status resumed = Run("null_seed", {"seed=null", "resume_from_checkpoint=true"});
  ASSERT_TRUE(resumed.ok()) << resumed;
  const absl::Status ref = Run("null_seed_ref", {absl::StrCat("seed=", seed)});
  ASSERT_TRUE(ref.ok()) << ref;
  const std::vector<testing::LogLine> got =
      testing::ReadLog(Out("null_seed") + "/logs/metrics.jsonl");
  ASSERT_EQ(got.size(), 2u);
  testing::ExpectSameLog(got, testing::ReadLog(Out("null_seed_ref") + "/logs/metrics.jsonl"));
}

// log_level: WARNING hides the INFO lines, DEBUG adds a line per step, INFO is the default;
// an unknown level is an error naming the key and the allowed values.
TEST_F(FinetuneRecipeTest, LogLevelFiltersTheRecipesMessages) {
  ::testing::internal::CaptureStderr();
  ASSERT_TRUE(Run("log_info", {}).ok());
  const std::string info = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(info, HasSubstr("Saved checkpoint"));
  EXPECT_THAT(info, HasSubstr("Model has"));
  EXPECT_THAT(info, ::testing::Not(HasSubstr("step 1:")));
  ::testing::internal::CaptureStderr();
  ASSERT_TRUE(Run("log_warning", {"log_level=warning"}).ok());
  const std::string warning = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(warning, ::testing::Not(HasSubstr("Saved checkpoint")));
  EXPECT_THAT(warning, ::testing::Not(HasSubstr("Model has")));
  ::testing::internal::CaptureStderr();
  ASSERT_TRUE(Run("log_debug", {"log_level=DEBUG"}).ok());
  const std::string debug = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(debug, HasSubstr("Saved checkpoint"));
  EXPECT_THAT(debug, HasSubstr("step 1:"));
  EXPECT_THAT(debug, HasSubstr("step 2:"));
  SetLogLevel(LogLevel::kInfo);

  absl::StatusOr<Config> config = MakeConfig("log_bad", {"log_level=verbose"});
  ASSERT_TRUE(config.ok()) << config.status();
  std::vector<std::string> problems;
  for (const ConfigError& e : recipe_.validate(*config)) problems.push_back(e.ToString());
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_THAT(problems[0], HasSubstr("log_level"));
  EXPECT_THAT(problems[0], HasSubstr("DEBUG, INFO, WARNING, ERROR"));
}

// torchtune's validation keys (dataset_val, run_val_every_n_steps, batch_size_val) do what
// ours do; both spellings with different values are an error naming both.
TEST_F(FinetuneRecipeTest, TorchtunesValidationKeysMapOntoOurs) {
  const std::string val_set =
      "  _component_: cctune.data.synthetic_arithmetic\n  num_samples: 6\n  seed: 99\n"
      "  first_index: 1000\n";
  const absl::Status ours = RunWith(
      "val_ours", absl::StrCat("validation_dataset:\n", val_set, "eval_every_n_steps: 1\n"));
  ASSERT_TRUE(ours.ok()) << ours;
  const absl::Status theirs = RunWith(
      "val_theirs", absl::StrCat("dataset_val:\n", val_set,
                                 "run_val_every_n_steps: 1\nbatch_size_val: 5\n"));
  ASSERT_TRUE(theirs.ok()) << theirs;
  const std::vector<std::string> want = ValLines("val_ours");
  ASSERT_EQ(want.size(), 2u);  // every step
  const std::vector<std::string> got = ValLines("val_theirs");
  ASSERT_EQ(got.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    // The mean loss over the same labels in other batches: equal to float rounding.
    const double a = std::stod(want[i].substr(want[i].find("\"val_loss\":") + 11));
    const double b = std::stod(got[i].substr(got[i].find("\"val_loss\":") + 11));
    EXPECT_NEAR(a, b, 1e-5 * std::abs(a)) << want[i] << " vs " << got[i];
  }

  absl::StatusOr<Config> config = MakeConfig("val_both", {"eval_every_n_steps=2",
                                                          "run_val_every_n_steps=3"});
  ASSERT_TRUE(config.ok()) << config.status();
  std::vector<std::string> problems;
  for (const ConfigError& e : recipe_.validate(*config)) problems.push_back(e.ToString());
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_THAT(problems[0], HasSubstr("run_val_every_n_steps"));
  EXPECT_THAT(problems[0], HasSubstr("eval_every_n_steps"));
  ASSERT_TRUE(config->Resolve().ok());
  const absl::Status both = recipe_.run(*config);
  EXPECT_THAT(both.message(), HasSubstr("'run_val_every_n_steps'"));
  absl::StatusOr<Config> same =
      MakeConfig("val_same", {"eval_every_n_steps=2", "run_val_every_n_steps=2"});
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_TRUE(recipe_.validate(*same).empty());
}

// profiler: with enabled: true, the scheduled steps' phases as Chrome trace-event JSON.
TEST_F(FinetuneRecipeTest, ProfilerWritesAChromeTraceOfTheScheduledSteps) {
  const std::string profiler =
      "profiler:\n  _component_: torchtune.training.setup_torch_profiler\n  enabled: true\n"
      "  output_dir: ${output_dir}/profiling_outputs\n  cpu: true\n  cuda: true\n"
      "  profile_memory: false\n  with_stack: false\n  record_shapes: true\n"
      "  with_flops: false\n  wait_steps: 1\n  warmup_steps: 0\n  active_steps: 1\n"
      "  num_cycles: 1\n";
  const absl::Status st = RunWith("profiled", profiler);
  ASSERT_TRUE(st.ok()) << st;
  std::ifstream in(Out("profiled") + "/profiling_outputs/trace.json");
  ASSERT_TRUE(in.good());
  const nlohmann::json trace = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(trace.is_discarded());
  ASSERT_TRUE(trace.contains("traceEvents"));
  std::vector<std::string> names;
  for (const nlohmann::json& e : trace["traceEvents"]) {
    EXPECT_EQ(e["ph"], "X");
    EXPECT_EQ(e["args"]["step"], 2);  // step 1 waits, step 2 is the active one
    EXPECT_GE(e["dur"].get<double>(), 0.0);
    EXPECT_TRUE(e["ts"].is_number());
    names.push_back(e["name"]);
  }
  EXPECT_THAT(names, ElementsAre("data", "forward", "backward", "optimizer"));

  ASSERT_TRUE(RunWith("unprofiled", "profiler:\n  enabled: false\n").ok());
  EXPECT_FALSE(testing::Exists(Out("unprofiled") + "/profiling_outputs"));
}

TEST_F(FinetuneRecipeTest, AHookErrorEndsTheRunWithTheLastGoodCheckpoint) {
  r_.fail_backward_after_first = true;
  const absl::Status st = Run("fail", {"save_every_n_steps=1"});
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  EXPECT_THAT(st.message(), HasSubstr("training stopped at step 2"));
  EXPECT_THAT(st.message(), HasSubstr("reduce-scatter: peer 1 is gone"));
  EXPECT_THAT(st.message(), HasSubstr("the last good checkpoint is " + Out("fail") + "/step_1"));
  EXPECT_EQ(testing::LatestStep(Out("fail")), 1);
}

TEST_F(FinetuneRecipeTest, ValidationAddsTheStrategysChecks) {
  absl::StatusOr<Config> config = MakeConfig("validate", {"seed=13", "batch_sise=4"});
  ASSERT_TRUE(config.ok()) << config.status();
  std::vector<std::string> problems;
  for (const ConfigError& e : recipe_.validate(*config)) problems.push_back(e.ToString());
  EXPECT_THAT(problems, ::testing::Contains(HasSubstr("refuses seed 13")));
  EXPECT_THAT(problems, ::testing::Contains(HasSubstr("batch_sise")));
  EXPECT_STREQ(recipe_.prog, "recording_finetune");
  EXPECT_TRUE(recipe_.schema().Describe().find("gradient_accumulation_steps") !=
              std::string::npos);
}

// LoRA, decorated with its own model step (everything else LoRA's): only the
// adapters train, and the checkpoints hold the PEFT adapter beside the merged weights.
class CountingLoRAStrategy final : public StrategyDecorator {
 public:
  explicit CountingLoRAStrategy(int* builds)
      : StrategyDecorator(MakeLoRAFinetuneStrategy()), builds_(builds) {}
  absl::StatusOr<std::unique_ptr<TransformerDecoder>> BuildModel(const ConfigNode& root,
                                                                 const ConfigNode& args) override {
    ++*builds_;
    return StrategyDecorator::BuildModel(root, args);
  }

 private:
  int* builds_;
};

// The tiny LoRA run: 16 samples, batch 8: 2 steps.
std::string TinyLoRAYaml(const std::string& out) {
  return absl::StrCat(
      "output_dir: ", out, "\n",
      testing::TinyModelYaml("cctune.models.tiny.lora_tiny_llama",
                             "  lora_attn_modules: [q_proj, v_proj]\n  lora_rank: 2\n"),
      testing::ByteTokenizerYaml(32), testing::SyntheticDatasetYaml(16, 5),
      "batch_size: 8\noptimizer:\n  _component_: torch.optim.AdamW\n  lr: 0.01\n");
}

TEST(DecoratedLoRATest, KeepsLoRAsTrainableSetAndCheckpoints) {
  int builds = 0;
  const RecipeEntry recipe =
      MakeFinetuneRecipe([&] { return std::make_unique<CountingLoRAStrategy>(&builds); });
  EXPECT_STREQ(recipe.prog, "lora_finetune_single_device");
  const std::string out = testing::TestTempDir("decorated_lora") + "/run";
  absl::StatusOr<Config> config = Config::FromString(TinyLoRAYaml(out));
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_TRUE(recipe.validate(*config).empty());
  ASSERT_TRUE(config->Resolve().ok());
  const absl::Status st = recipe.run(*config);
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(builds, 1);
  const std::string ckpt = out + "/step_2";
  EXPECT_EQ(testing::LatestStep(out), 2);
  // 2 layers x (q, v) x (A, B): the adapters only.
  EXPECT_EQ(testing::SafetensorsNames(ckpt + "/adapter_model.safetensors").size(), 8u);
  EXPECT_TRUE(testing::Exists(ckpt + "/adapter_config.json"));
  EXPECT_TRUE(testing::Exists(ckpt + "/model.safetensors"));
}

// save_adapter_weights_only: the checkpoints hold the adapter, adapter_config.json, config.json
// and the recipe state, no merged weights; a resume from one ends with the uninterrupted
// run's adapter.
TEST(LoRAAdapterOnlyTest, CheckpointsHoldOnlyTheAdapterAndResume) {
  const RecipeEntry recipe =
      MakeFinetuneRecipe([] { return MakeLoRAFinetuneStrategy(); });
  const std::string dir = testing::TestTempDir("lora_adapter_only");
  auto run = [&](const std::string& out, const std::vector<std::string>& overrides) {
    absl::StatusOr<Config> config = Config::FromString(TinyLoRAYaml(out));
    if (!config.ok()) return config.status();
    CCTUNE_RETURN_IF_ERROR(config->ApplyOverrides(overrides));
    CCTUNE_RETURN_IF_ERROR(config->Resolve());
    return recipe.run(*config);
  };
  ASSERT_TRUE(run(dir + "/full", {"save_adapter_weights_only=true"}).ok());
  const std::string ckpt = dir + "/full/step_2";
  EXPECT_TRUE(testing::Exists(ckpt + "/adapter_model.safetensors"));
  EXPECT_TRUE(testing::Exists(ckpt + "/adapter_config.json"));
  EXPECT_TRUE(testing::Exists(ckpt + "/config.json"));
  EXPECT_TRUE(testing::Exists(ckpt + "/recipe_state.safetensors"));
  EXPECT_FALSE(testing::Exists(ckpt + "/model.safetensors"));

  ASSERT_TRUE(run(dir + "/resumed", {"save_adapter_weights_only=true", "stop_after_steps=1"}).ok());
  const absl::Status resumed =
      run(dir + "/resumed", {"save_adapter_weights_only=true", "resume_from_checkpoint=true"});
  ASSERT_TRUE(resumed.ok()) << resumed;
  EXPECT_FALSE(testing::Exists(dir + "/resumed/step_2/model.safetensors"));
  testing::ExpectSameFiles(dir + "/resumed/step_2", ckpt, {"adapter_model.safetensors"});
}

}  // namespace
}  // namespace cctune
