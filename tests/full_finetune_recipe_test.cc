// The full fine-tune recipe end to end through its binary (//recipes:full_finetune_single_device)
// on a tiny GQA model and the synthetic arithmetic dataset: the loss falls, an interrupted and
// resumed run logs exactly the losses of an uninterrupted one and ends with the same weights,
// checkpoints are in HF layout and reload, bad configs and a non-finite loss fail clearly.
#include <cmath>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/hf.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/llama2c_fixture.h"
#include "tests/recipe_test_util.h"

namespace cctune {
namespace testing {
namespace {

using ::testing::HasSubstr;

constexpr char kRecipe[] = "full_finetune_single_device";

// The checkpoint holds every tensor its config.json implies, with its shape.
void ExpectTuneTensors(const HfCheckpoint& hf) {
  auto expected = ExpectedTuneTensors(hf.config);
  ASSERT_TRUE(expected.ok()) << expected.status();
  for (const auto& [name, shape] : *expected) {
    ASSERT_EQ(hf.state_dict.count(name), 1u) << name;
    EXPECT_EQ(hf.state_dict.at(name).shape(), shape) << name;
  }
}

class FullFinetuneRecipeTest : public ::testing::Test {
 protected:
  FullFinetuneRecipeTest() : runs_(TestTempDir("full_finetune_recipe")) {}

  // Run `name` of the tiny config (128 samples, batch 8: 16 steps per epoch, 2 epochs) with
  // `overrides`.
  ProcessResult Run(const std::string& name, const std::vector<std::string>& overrides) {
    return runs_.Run(kRecipe, name, TinyFullFinetuneYaml(Out(name), 128, 2), overrides);
  }
  std::string Out(const std::string& name) const { return runs_.Out(name); }
  std::string Log(const std::string& name) const { return runs_.Log(name); }

  RecipeRuns runs_;
};

TEST_F(FullFinetuneRecipeTest, LossFallsAndResumeIsBitIdentical) {
  ProcessResult full = Run("full", {});
  ASSERT_EQ(full.exit_code, 0) << full.err;
  const std::vector<LogLine> a = ReadLog(Log("full"));
  // 2 epochs x (16 batches / 2 accumulation)
  ASSERT_NO_FATAL_FAILURE(ExpectLossFalls(a, 16));
  EXPECT_EQ(a[0].lr, 0.0);  // warmup starts at 0, as torchtune's LambdaLR

  // Interrupted mid-epoch (step 3) and at the epoch boundary (step 8), each resumed.
  for (int stop : {3, 8}) {
    const std::string name = absl::StrCat("stop", stop);
    SCOPED_TRACE(name);
    ASSERT_TRUE(StopAndResume([&](const auto& o) { return Run(name, o); }, Out(name), stop));
    ExpectSameLog(ReadLog(Log(name)), a);
    ExpectSameFiles(Out(name) + "/step_16", Out("full") + "/step_16", {"model.safetensors"});
  }

  // The final checkpoint: HF layout that reloads with the model's tensors.
  const std::string ckpt = Out("full") + "/step_16";
  EXPECT_EQ(ReadFile(Out("full") + "/LATEST"), "step_16\n");
  EXPECT_TRUE(Exists(ckpt + "/config.json"));
  EXPECT_TRUE(Exists(ckpt + "/model.safetensors"));
  EXPECT_TRUE(Exists(ckpt + "/recipe_state.safetensors"));
  // No checkpointer.keep_last_n_checkpoints: every checkpoint is kept (torchtune's default).
  EXPECT_TRUE(Exists(Out("full") + "/step_8/model.safetensors"));
  absl::StatusOr<HfCheckpoint> hf = LoadHfCheckpoint(ckpt);
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ(hf->config.hidden_size, 32);
  EXPECT_EQ(hf->config.num_attention_heads, 4);
  EXPECT_EQ(hf->config.num_key_value_heads, 2);
  EXPECT_EQ(hf->config.vocab_size, 264);
  ExpectTuneTensors(*hf);
}

// optimizer_in_bwd: the same losses and final weights as the ordinary path (one layer's
// gradients at a time instead of the arena), and a bit-identical resume.
TEST_F(FullFinetuneRecipeTest, OptimizerInBackwardMatchesTheOrdinaryPathAndResumes) {
  const std::vector<std::string> common = {"gradient_accumulation_steps=1",
                                           "clip_grad_norm=null", "epochs=1"};
  ProcessResult plain = Run("plain", common);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  std::vector<std::string> in_bwd = common;
  in_bwd.push_back("optimizer_in_bwd=true");
  ExpectTrainsAndResumesExactly(
      runs_, [&](const std::string& name, const auto& o) { return Run(name, o); }, "in_bwd",
      in_bwd, 16, 5, {"model.safetensors"});
  const std::vector<LogLine> a = ReadLog(Log("plain")), b = ReadLog(Log("in_bwd"));
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].loss, b[i].loss) << "step " << i;
    EXPECT_NEAR(a[i].grad_norm, b[i].grad_norm, 1e-9 * a[i].grad_norm) << "step " << i;
  }
  ExpectSameFiles(Out("in_bwd") + "/step_16", Out("plain") + "/step_16", {"model.safetensors"});
}

// bf16 weights (f32 gradients and master copies): trains, and resumes bit-identically.
TEST_F(FullFinetuneRecipeTest, Bf16TrainsAndResumesExactly) {
  ExpectTrainsAndResumesExactly(
      runs_, [&](const std::string& name, const auto& o) { return Run(name, o); }, "bf16",
      {"dtype=bf16", "epochs=1"}, 8, 5, {"model.safetensors"});
  absl::StatusOr<HfCheckpoint> hf = LoadHfCheckpoint(Out("bf16") + "/step_8");
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ(hf->state_dict.at("tok_embeddings.weight").dtype(), DType::kBF16);
}

// Initial weights from a llama2.c checkpoint (its header sizes the model); the output is in
// HF layout and reloads with the same shapes.
TEST_F(FullFinetuneRecipeTest, FineTunesALlama2cCheckpoint) {
  const std::string fixture = Out("llama2c_fixture");
  std::filesystem::create_directories(fixture);
  absl::Status written = testing::WriteLlama2cFixture(fixture);
  ASSERT_TRUE(written.ok()) << written;
  const std::string yaml = absl::StrCat("output_dir: ", Out("llama2c"), R"(
model:
  _component_: cctune.models.llama2c.llama2c
checkpointer:
  _component_: cctune.training.Llama2cCheckpointer
  checkpoint_dir: )", fixture, R"(
  checkpoint_files: [model.bin]
  model_type: LLAMA2C
  keep_last_n_checkpoints: 2
tokenizer:
  _component_: cctune.models.llama2c.llama2c_tokenizer
  path: )", fixture, R"(/tok.bin
dataset:
  _component_: cctune.data.synthetic_arithmetic
  num_samples: 32
batch_size: 4
save_every_n_steps: 2
optimizer:
  _component_: torch.optim.SGD
  lr: 0.1
)", JsonlLoggerYaml());
  ProcessResult r = runs_.Run(kRecipe, "llama2c", yaml);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(ReadLog(Log("llama2c")).size(), 8u);
  EXPECT_EQ(ReadFile(Out("llama2c") + "/LATEST"), "step_8\n");
  // keep_last_n_checkpoints: 2 of the saves at steps 2, 4, 6 and 8.
  EXPECT_TRUE(Exists(Out("llama2c") + "/step_6/model.safetensors"));
  EXPECT_FALSE(Exists(Out("llama2c") + "/step_4"));
  EXPECT_FALSE(Exists(Out("llama2c") + "/step_2"));
  absl::StatusOr<HfCheckpoint> trained = LoadHfCheckpoint(Out("llama2c") + "/step_8");
  ASSERT_TRUE(trained.ok()) << trained.status();
  ExpectTuneTensors(*trained);
}

// Activation checkpointing recomputes each layer with the same ops: identical losses.
TEST_F(FullFinetuneRecipeTest, ActivationCheckpointingGivesIdenticalLosses) {
  ProcessResult off = Run("ac_off", {"epochs=1", "enable_activation_checkpointing=false"});
  ASSERT_EQ(off.exit_code, 0) << off.err;
  ProcessResult on = Run("ac_on", {"epochs=1", "enable_activation_checkpointing=true"});
  ASSERT_EQ(on.exit_code, 0) << on.err;
  const std::vector<LogLine> a = ReadLog(Log("ac_off"));
  const std::vector<LogLine> b = ReadLog(Log("ac_on"));
  ASSERT_EQ(a.size(), 8u);
  ASSERT_EQ(b.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(b[i].loss, a[i].loss) << "step " << a[i].step;
}

// The TensorBoard logger component writes an event file.
TEST_F(FullFinetuneRecipeTest, TensorBoardLoggerWritesEvents) {
  ProcessResult r =
      Run("tb", {"epochs=1", "max_steps_per_epoch=2",
                 "metric_logger._component_=torchtune.training.metric_logging.TensorBoardLogger"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  int event_files = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(Out("tb") + "/logs")) {
    if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0) {
      ++event_files;
      EXPECT_GT(e.file_size(), 0u);
    }
  }
  EXPECT_EQ(event_files, 1);
}

TEST_F(FullFinetuneRecipeTest, BadConfigsFailClearly) {
  ProcessResult unknown = Run("bad1", {"batch_sise=4"});
  EXPECT_NE(unknown.exit_code, 0);
  EXPECT_THAT(unknown.err, HasSubstr("unknown key 'batch_sise'"));

  ProcessResult missing = Run("bad2", {"dataset._component_=torchtune.datasets.instruct_dataset",
                                       "dataset.num_samples=null", "dataset.seed=null"});
  EXPECT_NE(missing.exit_code, 0);

  // A JSON dataset whose file does not exist.
  std::string yaml = TinyFullFinetuneYaml(Out("bad3"), 128, 2);
  const std::string ds = "  _component_: cctune.data.synthetic_arithmetic\n  num_samples: 128\n"
                         "  seed: 5\n";
  yaml.replace(yaml.find(ds), ds.size(),
               "  _component_: torchtune.datasets.text_completion_dataset\n"
               "  source: /nonexistent/cctune_data.json\n");
  ProcessResult no_file = runs_.Run(kRecipe, "bad3", yaml);
  EXPECT_NE(no_file.exit_code, 0);
  EXPECT_THAT(no_file.err, HasSubstr("/nonexistent/cctune_data.json"));
  EXPECT_THAT(no_file.err, HasSubstr("does not exist"));
  EXPECT_FALSE(Exists(Out("bad3") + "/LATEST"));

  ProcessResult no_checkpoint = Run("bad4", {"resume_from_checkpoint=true"});
  EXPECT_NE(no_checkpoint.exit_code, 0);
  EXPECT_THAT(no_checkpoint.err, HasSubstr(Out("bad4") + "/LATEST does not exist"));

  ProcessResult too_few = Run("bad5", {"gradient_accumulation_steps=60000"});
  EXPECT_NE(too_few.exit_code, 0);
  EXPECT_THAT(too_few.err, HasSubstr("fewer than gradient_accumulation_steps (60000)"));

  // optimizer_in_bwd refuses clipping and accumulation with torchtune's messages.
  ProcessResult in_bwd = Run("bad6", {"optimizer_in_bwd=true"});
  EXPECT_NE(in_bwd.exit_code, 0);
  EXPECT_THAT(in_bwd.err, HasSubstr("Gradient clipping is not supported with optimizer in bwd"));
  ProcessResult in_bwd_accum = Run("bad6", {"optimizer_in_bwd=true", "clip_grad_norm=null"});
  EXPECT_NE(in_bwd_accum.exit_code, 0);
  EXPECT_THAT(in_bwd_accum.err,
              HasSubstr("Gradient accumulation is not supported with optimizer in bwd"));

  // Resuming with another seed than the checkpoint's is refused, naming both.
  ASSERT_EQ(Run("bad7", {"stop_after_steps=1"}).exit_code, 0);
  ProcessResult reseeded = Run("bad7", {"resume_from_checkpoint=true", "seed=12345"});
  EXPECT_NE(reseeded.exit_code, 0);
  EXPECT_THAT(reseeded.err, HasSubstr("was trained with seed"));
  EXPECT_THAT(reseeded.err, HasSubstr("config has 12345"));
}

TEST_F(FullFinetuneRecipeTest, NonFiniteLossStopsAndKeepsTheLastCheckpoint) {
  ProcessResult r = Run("nan", {"optimizer.lr=1e30", "lr_scheduler=null", "save_every_n_steps=1"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("training stopped at step 2"));
  EXPECT_THAT(r.err, HasSubstr("non-finite"));
  EXPECT_THAT(r.err, HasSubstr("the last good checkpoint is " + Out("nan") + "/step_1"));
  EXPECT_EQ(ReadFile(Out("nan") + "/LATEST"), "step_1\n");
  absl::StatusOr<HfCheckpoint> hf = LoadHfCheckpoint(Out("nan") + "/step_1");
  ASSERT_TRUE(hf.ok()) << hf.status();
  for (const auto& [name, t] : hf->state_dict) {
    auto values = t.ToFloatVector();
    ASSERT_TRUE(values.ok());
    for (float v : *values) ASSERT_TRUE(std::isfinite(v)) << name;
  }
}

// The built-in configs are valid; without the downloads only their files are reported.
TEST_F(FullFinetuneRecipeTest, BuiltinConfigsValidate) {
  for (const char* name : {"llama3_2/1B_full_single_device", "llama3_1/8B_full_single_device"}) {
    ProcessResult r = RunProcess(RecipeArgv(kRecipe, name, {"output_dir=" + Out(name)}));
    if (r.exit_code == 0) continue;  // the files happen to exist: it trained
    std::istringstream lines(r.err);
    std::string line;
    int problems = 0;
    while (std::getline(lines, line)) {
      if (line.rfind("  configs/", 0) != 0) continue;
      ++problems;
      EXPECT_THAT(line, HasSubstr("does not exist")) << name;
    }
    EXPECT_GT(problems, 0) << name << ": " << r.err;
  }
  // The demo config is complete: it runs (shortened here).
  ProcessResult demo = RunProcess(RecipeArgv(
      kRecipe, "demo/full_finetune",
      {"output_dir=" + Out("demo"), "epochs=1", "max_steps_per_epoch=2",
       "dataset.num_samples=256", "validation_dataset.num_samples=16", "eval_every_n_steps=2"}));
  ASSERT_EQ(demo.exit_code, 0) << demo.err;
  EXPECT_THAT(ReadFile(Log("demo")), HasSubstr("\"val_loss\""));
  EXPECT_EQ(ReadFile(Out("demo") + "/LATEST"), "step_2\n");
}

// Hostile integers and norms: each an error naming the key, before any training.
TEST_F(FullFinetuneRecipeTest, HostileValuesAreErrorsNamingTheKey) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      // Clipping used to be silently off for these.
      {"clip_grad_norm=0", "key 'clip_grad_norm': must be > 0"},
      {"clip_grad_norm=-1.5", "key 'clip_grad_norm': must be > 0"},
      {"clip_grad_norm=.nan", "key 'clip_grad_norm': must be > 0"},
      // std::length_error from reserve() used to abort.
      {"dataset.num_samples=9223372036854775807", "key 'dataset.num_samples': must be in [1, "},
      // epochs * steps per epoch used to overflow.
      {"epochs=9223372036854775807", "key 'epochs': must be in [1, 1048576]"},
      {"batch_size=9223372036854775807", "key 'batch_size': must be in [1, 65536]"},
      {"gradient_accumulation_steps=-1", "key 'gradient_accumulation_steps': must be in [1, "},
      {"max_steps_per_epoch=0", "key 'max_steps_per_epoch': must be in [1, "},
      {"dataset.first_index=9223372036854775807", "key 'dataset.first_index': must be in [0, "},
      {"tokenizer.max_seq_len=0", "key 'tokenizer.max_seq_len': must be in [1, 1048576]"},
      {"model.num_layers=1000000000", "key 'model.num_layers': must be in [1, 4096]"},
  };
  int i = 0;
  for (const auto& [override, expected] : cases) {
    ProcessResult r = Run(absl::StrCat("hostile", i++), {override});
    EXPECT_EQ(r.exit_code, 1) << override << "\n" << r.err;
    EXPECT_THAT(r.err, HasSubstr(expected)) << override;
  }
  // null stays "no clipping".
  EXPECT_EQ(Run("hostile_null", {"clip_grad_norm=null", "stop_after_steps=1"}).exit_code, 0);
}

}  // namespace
}  // namespace testing
}  // namespace cctune
