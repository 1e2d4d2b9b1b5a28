// The LoRA fine-tune recipe end to end through its binary (//recipes:lora_finetune_single_device)
// on a tiny GQA model (random base) and on the committed demo model (base from its HF
// checkpoint), with the synthetic arithmetic dataset: the loss falls, an interrupted and resumed
// run logs exactly the losses of an uninterrupted one and ends with the same adapter, the saved
// merged weights equal base + alpha/rank * B.A computed here in fp64 (and every other weight is
// the base's, bit for bit), the PEFT files carry the right names and fields, bad configs fail.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/hf.h"
#include "checkpoint/peft.h"
#include "core/tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/llama2c_fixture.h"
#include "tests/recipe_test_util.h"

namespace cctune {
namespace testing {
namespace {

using ::testing::HasSubstr;

constexpr char kRecipe[] = "lora_finetune_single_device";

// 64 samples, batch 8: 8 steps per epoch, 2 epochs. LoRA on q, v, output_proj, the MLP and
// the output.
std::string TinyConfigYaml(const std::string& out) {
  return absl::StrCat("output_dir: ", out, "\n",
                      TinyModelYaml("cctune.models.tiny.lora_tiny_llama", R"(
  lora_attn_modules: ['q_proj', 'v_proj', 'output_proj']
  apply_lora_to_mlp: true
  apply_lora_to_output: true
  lora_rank: 4
  lora_alpha: 8
  lora_dropout: 0.0
)"),
                      ByteTokenizerYaml(32), SyntheticDatasetYaml(64, 5), R"(seed: 7
shuffle: true
batch_size: 8
epochs: 2
clip_grad_norm: 1.0
optimizer:
  _component_: torch.optim.AdamW
  lr: 0.02
lr_scheduler:
  _component_: torchtune.training.lr_schedulers.get_cosine_schedule_with_warmup
  num_warmup_steps: 1
)", JsonlLoggerYaml(), R"(log_every_n_steps: 1
dtype: fp32
device: cpu
)");
}

// The demo model (tests/assets/demo) with LoRA on q and v, 3 steps on 3-digit additions.
std::string DemoConfigYaml(const std::string& out) {
  return absl::StrCat(R"(output_dir: )", out, R"(
model:
  _component_: cctune.models.tiny.lora_tiny_llama
  vocab_size: 264
  num_layers: 4
  num_heads: 8
  num_kv_heads: 2
  embed_dim: 128
  intermediate_dim: 384
  max_seq_len: 64
  lora_attn_modules: [q_proj, v_proj]
  lora_rank: 8
  lora_alpha: 16
tokenizer:
  _component_: cctune.data.byte_tokenizer
  max_seq_len: 64
checkpointer:
  _component_: torchtune.training.FullModelHFCheckpointer
  checkpoint_dir: )", RunfilePath("tests/assets/demo"), R"(
  checkpoint_files: [model.safetensors]
  output_dir: ${output_dir}
  model_type: LLAMA3
dataset:
  _component_: cctune.data.synthetic_arithmetic
  num_samples: 24
  seed: 3
  max_digits: 3
seed: 11
batch_size: 8
epochs: 1
optimizer:
  _component_: torch.optim.AdamW
  lr: 0.01
)", JsonlLoggerYaml(), "dtype: fp32\ndevice: cpu\n");
}

class LoRAFinetuneRecipeTest : public ::testing::Test {
 protected:
  LoRAFinetuneRecipeTest() : runs_(TestTempDir("lora_finetune_recipe")) {}

  ProcessResult Run(const std::string& name, const std::string& yaml,
                    const std::vector<std::string>& overrides) {
    return runs_.Run(kRecipe, name, yaml, overrides);
  }
  ProcessResult RunTiny(const std::string& name, const std::vector<std::string>& overrides) {
    return Run(name, TinyConfigYaml(Out(name)), overrides);
  }
  std::string Out(const std::string& name) const { return runs_.Out(name); }
  std::string Log(const std::string& name) const { return runs_.Log(name); }
  // The checkpoints hold the same adapter and merged weights, byte for byte.
  static void ExpectSameWeights(const std::string& got, const std::string& want) {
    ExpectSameFiles(got, want, {"adapter_model.safetensors", "model.safetensors"});
  }

  RecipeRuns runs_;
};

TEST_F(LoRAFinetuneRecipeTest, LossFallsAndResumeIsBitIdentical) {
  ProcessResult full = RunTiny("full", {});
  ASSERT_EQ(full.exit_code, 0) << full.err;
  EXPECT_THAT(full.err, HasSubstr("trainable (LoRA)"));
  const std::vector<LogLine> a = ReadLog(Log("full"));
  ASSERT_NO_FATAL_FAILURE(ExpectLossFalls(a, 16));

  // Interrupted mid-epoch (step 3) and at the epoch boundary (step 8), each resumed.
  for (int stop : {3, 8}) {
    const std::string name = absl::StrCat("stop", stop);
    SCOPED_TRACE(name);
    ASSERT_TRUE(StopAndResume([&](const auto& o) { return RunTiny(name, o); }, Out(name), stop));
    ExpectSameLog(ReadLog(Log(name)), a);
    ExpectSameWeights(Out(name) + "/step_16", Out("full") + "/step_16");
  }

  // PEFT files: names in PEFT spelling, config fields.
  const std::string ckpt = Out("full") + "/step_16";
  EXPECT_TRUE(Exists(ckpt + "/recipe_state.safetensors"));
  EXPECT_TRUE(Exists(ckpt + "/config.json"));
  const std::vector<std::string> names = SafetensorsNames(ckpt + "/adapter_model.safetensors");
  // 2 layers x (q, v, o, gate, down, up) x (A, B) + lm_head x (A, B).
  EXPECT_EQ(names.size(), 2u * 6u * 2u + 2u);
  for (const char* expected :
       {"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight",
        "base_model.model.model.layers.1.self_attn.v_proj.lora_B.weight",
        "base_model.model.model.layers.1.self_attn.o_proj.lora_A.weight",
        "base_model.model.model.layers.0.mlp.gate_proj.lora_A.weight",
        "base_model.model.model.layers.0.mlp.down_proj.lora_B.weight",
        "base_model.model.model.layers.1.mlp.up_proj.lora_A.weight",
        "base_model.model.lm_head.lora_B.weight"}) {
    EXPECT_THAT(names, ::testing::Contains(std::string(expected)));
  }
  nlohmann::json cfg = nlohmann::json::parse(ReadFile(ckpt + "/adapter_config.json"));
  EXPECT_EQ(cfg["peft_type"], "LORA");
  EXPECT_EQ(cfg["task_type"], "CAUSAL_LM");
  EXPECT_EQ(cfg["r"].get<int64_t>(), 4);
  EXPECT_EQ(cfg["lora_alpha"].get<double>(), 8.0);
  std::vector<std::string> targets = cfg["target_modules"].get<std::vector<std::string>>();
  std::sort(targets.begin(), targets.end());
  EXPECT_EQ(targets, (std::vector<std::string>{"down_proj", "gate_proj", "lm_head", "o_proj",
                                               "q_proj", "up_proj", "v_proj"}));
}

// lora_dropout 0.1: the loss still falls, the masks are really applied (the gradient differs
// from the run without dropout from the first step), and a run interrupted mid-epoch and
// resumed (with activation checkpointing switched on, which recomputes the same masks) logs
// exactly the uninterrupted run's losses and ends with the same adapter: the generator state
// the masks come from is saved and restored with the recipe state.
TEST_F(LoRAFinetuneRecipeTest, DropoutTrainsAndResumesExactly) {
  ProcessResult full = RunTiny("drop", {"model.lora_dropout=0.1"});
  ASSERT_EQ(full.exit_code, 0) << full.err;
  const std::vector<LogLine> a = ReadLog(Log("drop"));
  ASSERT_NO_FATAL_FAILURE(ExpectLossFalls(a, 16));
  nlohmann::json cfg =
      nlohmann::json::parse(ReadFile(Out("drop") + "/step_16/adapter_config.json"));
  EXPECT_EQ(cfg["lora_dropout"].get<double>(), 0.1);

  ProcessResult no_drop = RunTiny("no_drop", {"stop_after_steps=3"});
  ASSERT_EQ(no_drop.exit_code, 0) << no_drop.err;
  const std::vector<LogLine> z = ReadLog(Log("no_drop"));
  ASSERT_EQ(z.size(), 3u);
  // lora_b starts at 0 and the first step's lr is 0 (warmup), so the first two losses cannot
  // see the masks, but B's gradient does from the first step, and the third loss does.
  EXPECT_EQ(z[0].loss, a[0].loss);
  EXPECT_EQ(z[1].loss, a[1].loss);
  EXPECT_NE(z[0].grad_norm, a[0].grad_norm);
  EXPECT_NE(z[2].loss, a[2].loss);

  ASSERT_TRUE(StopAndResume([&](const auto& o) { return RunTiny("drop_resumed", o); },
                            Out("drop_resumed"), 5, {"model.lora_dropout=0.1"},
                            {"enable_activation_checkpointing=true"}));
  ExpectSameLog(ReadLog(Log("drop_resumed")), a);
  ExpectSameWeights(Out("drop_resumed") + "/step_16", Out("drop") + "/step_16");
}

// bf16 weights (f32 adapter gradients and master copies): trains, resumes bit-identically, and
// the saved adapter and merged weights are bf16.
TEST_F(LoRAFinetuneRecipeTest, Bf16TrainsAndResumesExactly) {
  ExpectTrainsAndResumesExactly(
      runs_, [&](const std::string& name, const auto& o) { return RunTiny(name, o); }, "bf16",
      {"dtype=bf16", "epochs=1"}, 8, 5, {"adapter_model.safetensors", "model.safetensors"});
  absl::StatusOr<HfCheckpoint> hf = LoadHfCheckpoint(Out("bf16") + "/step_8");
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ(hf->state_dict.at("layers.0.attn.q_proj.weight").dtype(), DType::kBF16);
  absl::StatusOr<PeftAdapter> adapter = LoadPeftAdapter(Out("bf16") + "/step_8", hf->config);
  ASSERT_TRUE(adapter.ok()) << adapter.status();
  EXPECT_EQ(adapter->state_dict.at("layers.0.attn.q_proj.lora_a.weight").dtype(), DType::kBF16);
}

// Base weights from the demo model's HF checkpoint: the saved merged weights are the base's
// plus alpha/rank * B.A (the saved adapter) where adapted, and the base's bit for bit elsewhere.
TEST_F(LoRAFinetuneRecipeTest, OnlyAdaptersChangeAndMergedWeightsAreBasePlusScaledBA) {
  ProcessResult r = Run("demo", DemoConfigYaml(Out("demo")), {});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_EQ(ReadLog(Log("demo")).size(), 3u);
  const std::string ckpt = Out("demo") + "/step_3";
  absl::StatusOr<HfCheckpoint> base = LoadHfCheckpoint(RunfilePath("tests/assets/demo"));
  ASSERT_TRUE(base.ok()) << base.status();
  absl::StatusOr<HfCheckpoint> merged = LoadHfCheckpoint(ckpt);
  ASSERT_TRUE(merged.ok()) << merged.status();
  absl::StatusOr<PeftAdapter> adapter = LoadPeftAdapter(ckpt, merged->config);
  ASSERT_TRUE(adapter.ok()) << adapter.status();
  EXPECT_EQ(adapter->config.r, 8);
  EXPECT_EQ(adapter->config.lora_alpha, 16.0);
  EXPECT_EQ(adapter->state_dict.size(), 4u * 2u * 2u);  // 4 layers x (q, v) x (A, B)
  const double scale = 16.0 / 8.0;
  ASSERT_EQ(merged->state_dict.size(), base->state_dict.size());
  int adapted = 0;
  for (const auto& [name, base_t] : base->state_dict) {
    ASSERT_EQ(merged->state_dict.count(name), 1u) << name;
    const Tensor& merged_t = merged->state_dict.at(name);
    ASSERT_EQ(merged_t.shape(), base_t.shape()) << name;
    const std::vector<double> w0 = ToDoubles(base_t), w1 = ToDoubles(merged_t);
    const std::string prefix = name.substr(0, name.size() - std::string(".weight").size());
    auto a_it = adapter->state_dict.find(prefix + ".lora_a.weight");
    if (a_it == adapter->state_dict.end()) {
      EXPECT_EQ(w1, w0) << name << " is not adapted and must be the base's";
      continue;
    }
    ++adapted;
    const std::vector<double> a = ToDoubles(a_it->second);
    const std::vector<double> b = ToDoubles(adapter->state_dict.at(prefix + ".lora_b.weight"));
    const int64_t out = base_t.shape()[0], in = base_t.shape()[1];
    const int64_t rank = a_it->second.shape()[0];
    ASSERT_EQ(rank, 8);
    double max_delta = 0, max_err = 0;
    for (int64_t o = 0; o < out; ++o) {
      for (int64_t i = 0; i < in; ++i) {
        double ba = 0;
        for (int64_t k = 0; k < rank; ++k) ba += b[o * rank + k] * a[k * in + i];
        const double expected = w0[o * in + i] + scale * ba;
        max_delta = std::max(max_delta, std::abs(scale * ba));
        max_err = std::max(max_err, std::abs(w1[o * in + i] - expected) /
                                        (1e-6 + std::abs(expected)));
      }
    }
    EXPECT_GT(max_delta, 1e-5) << name << ": the adapter did not train";
    EXPECT_LT(max_err, 1e-5) << name;
  }
  EXPECT_EQ(adapted, 8);  // 4 layers x (q, v)
}

// Fine-tuning an HF checkpoint with no builder written: cctune.models.lora_from_config_json
// reads the demo's config.json and trains the very adapters lora_tiny_llama with the demo's
// sizes trains (same seed, same bits).
TEST_F(LoRAFinetuneRecipeTest, LoRAFromConfigJsonTrainsTheSameAdapters) {
  ProcessResult sized = Run("demo_sized", DemoConfigYaml(Out("demo_sized")), {});
  ASSERT_EQ(sized.exit_code, 0) << sized.err;
  ProcessResult json = Run("demo_json", DemoConfigYaml(Out("demo_json")),
                           {"model._component_=cctune.models.lora_from_config_json",
                            "~model.vocab_size", "~model.num_layers", "~model.num_heads",
                            "~model.num_kv_heads", "~model.embed_dim", "~model.intermediate_dim",
                            "~model.max_seq_len"});
  ASSERT_EQ(json.exit_code, 0) << json.err;
  const std::string adapter = "/step_3/adapter_model.safetensors";
  const std::string bytes = ReadFile(Out("demo_json") + adapter);
  ASSERT_FALSE(bytes.empty()) << Out("demo_json") + adapter;
  EXPECT_EQ(bytes, ReadFile(Out("demo_sized") + adapter));
}

TEST_F(LoRAFinetuneRecipeTest, BadConfigsFailClearly) {
  ProcessResult r = RunTiny("dropout", {"model.lora_dropout=1.5"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("lora_dropout"));
  // A plain (non-LoRA) builder: nothing to train.
  std::string plain;
  std::istringstream lines(TinyConfigYaml(Out("plain")));
  for (std::string line; std::getline(lines, line);) {
    if (line.find("_component_: cctune.models.tiny") != std::string::npos) {
      line = "  _component_: cctune.models.tiny.tiny_llama";
    } else if (line.rfind("  lora_", 0) == 0 || line.rfind("  apply_lora_", 0) == 0) {
      continue;
    }
    plain += line + "\n";
  }
  r = Run("plain", plain, {});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("no LoRA adapters"));
  r = RunTiny("bad_module", {"model.lora_attn_modules=q_proj,x_proj"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("x_proj"));
  r = RunTiny("rank", {"model.lora_rank=0"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("lora_rank"));
  r = RunTiny("resume_nothing", {"resume_from_checkpoint=true"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("LATEST"));
}

}  // namespace
}  // namespace testing
}  // namespace cctune
