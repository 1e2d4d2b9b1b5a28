// The LoRA fine-tune recipe end to end through its binary (//recipes:lora_finetune_single_device)
// on a tiny GQA model (random base) and on the committed demo model (base from its HF
// checkpoint), with the synthetic arithmetic dataset: the loss falls, an interrupted and resumed
// run logs exactly the losses of an uninterrupted one and ends with the same adapter, the saved
// merged weights equal base + alpha/rank * B.A computed here in fp64 (and every other weight is
// the base's, bit for bit), the PEFT files carry the right names and fields, bad configs fail.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
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
#include "tests/subprocess.h"

namespace cctune {
namespace {

using ::testing::HasSubstr;
using testing::ProcessResult;
using testing::ReadFile;
using testing::RunfilePath;
using testing::RunProcess;

bool Exists(const std::string& path) { return std::ifstream(path).good(); }

// 64 samples, batch 8: 8 steps per epoch, 2 epochs. LoRA on q, v, output_proj, the MLP and
// the output.
std::string TinyConfigYaml(const std::string& out) {
  return absl::StrCat(R"(output_dir: )", out, R"(
model:
  _component_: cctune.models.tiny.lora_tiny_llama
  vocab_size: 264
  num_layers: 2
  num_heads: 4
  num_kv_heads: 2
  embed_dim: 32
  intermediate_dim: 96
  max_seq_len: 32
  lora_attn_modules: ['q_proj', 'v_proj', 'output_proj']
  apply_lora_to_mlp: true
  apply_lora_to_output: true
  lora_rank: 4
  lora_alpha: 8
  lora_dropout: 0.0
tokenizer:
  _component_: cctune.data.byte_tokenizer
  max_seq_len: 32
dataset:
  _component_: cctune.data.synthetic_arithmetic
  num_samples: 64
  seed: 5
seed: 7
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
metric_logger:
  _component_: torchtune.training.metric_logging.JsonlLogger
  log_dir: ${output_dir}/logs
log_every_n_steps: 1
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
metric_logger:
  _component_: torchtune.training.metric_logging.JsonlLogger
  log_dir: ${output_dir}/logs
dtype: fp32
device: cpu
)");
}

struct LogLine {
  int64_t step;
  double loss, lr, grad_norm;
};

std::vector<LogLine> ReadLog(const std::string& path) {
  std::vector<LogLine> lines;
  std::istringstream in(ReadFile(path));
  std::string line;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line);
    if (!j.contains("loss")) continue;
    lines.push_back({j["step"].get<int64_t>(), j["loss"].get<double>(), j["lr"].get<double>(),
                     j["grad_norm"].get<double>()});
  }
  return lines;
}

// The tensor names in a safetensors file's header.
std::vector<std::string> SafetensorsNames(const std::string& path) {
  const std::string bytes = ReadFile(path);
  std::vector<std::string> names;
  if (bytes.size() < 8) return names;
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);  // little-endian hosts only, as the project
  if (bytes.size() < 8 + n) return names;
  nlohmann::json header = nlohmann::json::parse(bytes.substr(8, n));
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() != "__metadata__") names.push_back(it.key());
  }
  return names;
}

std::vector<double> ToDoubles(const Tensor& t) {
  absl::StatusOr<Tensor> f = t.To(DType::kF32);
  CCTUNE_CHECK_OK(f.status());
  absl::StatusOr<Tensor> c = f->Contiguous();
  CCTUNE_CHECK_OK(c.status());
  const float* p = c->data<float>();
  return std::vector<double>(p, p + c->numel());
}

class LoRAFinetuneRecipeTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::TestTempDir("lora_finetune_recipe"); }

  ProcessResult Run(const std::string& name, const std::string& yaml,
                    std::vector<std::string> overrides) {
    const std::string config = absl::StrCat(dir_, "/", name, ".yaml");
    std::ofstream(config) << yaml;
    std::vector<std::string> argv = {RunfilePath("recipes/lora_finetune_single_device"),
                                     "--config", config};
    argv.insert(argv.end(), overrides.begin(), overrides.end());
    return RunProcess(argv);
  }
  ProcessResult RunTiny(const std::string& name, std::vector<std::string> overrides) {
    return Run(name, TinyConfigYaml(Out(name)), std::move(overrides));
  }
  std::string Out(const std::string& name) const { return absl::StrCat(dir_, "/", name); }

  std::string dir_;
};

TEST_F(LoRAFinetuneRecipeTest, LossFallsAndResumeIsBitIdentical) {
  ProcessResult full = RunTiny("full", {});
  ASSERT_EQ(full.exit_code, 0) << full.err;
  EXPECT_THAT(full.err, HasSubstr("trainable (LoRA)"));
  const std::vector<LogLine> a = ReadLog(Out("full") + "/logs/metrics.jsonl");
  ASSERT_EQ(a.size(), 16u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].step, static_cast<int64_t>(i) + 1);
    EXPECT_TRUE(std::isfinite(a[i].loss));
  }
  const double first = (a[0].loss + a[1].loss + a[2].loss) / 3;
  const double last = (a[13].loss + a[14].loss + a[15].loss) / 3;
  EXPECT_LT(last, first - 0.5) << "first " << first << " last " << last;

  // Interrupted mid-epoch (step 3) and at the epoch boundary (step 8), each resumed.
  for (int stop : {3, 8}) {
    const std::string name = absl::StrCat("stop", stop);
    ProcessResult first_part = RunTiny(name, {absl::StrCat("stop_after_steps=", stop)});
    ASSERT_EQ(first_part.exit_code, 0) << first_part.err;
    EXPECT_EQ(ReadFile(Out(name) + "/LATEST"), absl::StrCat("step_", stop, "\n"));
    ProcessResult second_part = RunTiny(name, {"resume_from_checkpoint=true"});
    ASSERT_EQ(second_part.exit_code, 0) << second_part.err;
    const std::vector<LogLine> b = ReadLog(Out(name) + "/logs/metrics.jsonl");
    ASSERT_EQ(b.size(), a.size()) << name;
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(b[i].step, a[i].step) << name;
      EXPECT_EQ(b[i].loss, a[i].loss) << name << " step " << a[i].step;  // bit-identical
      EXPECT_EQ(b[i].lr, a[i].lr) << name << " step " << a[i].step;
      EXPECT_EQ(b[i].grad_norm, a[i].grad_norm) << name << " step " << a[i].step;
    }
    for (const char* file : {"adapter_model.safetensors", "model.safetensors"}) {
      EXPECT_EQ(ReadFile(Out(name) + "/step_16/" + file),
                ReadFile(Out("full") + "/step_16/" + file))
          << name << " " << file;
    }
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
  const std::vector<LogLine> a = ReadLog(Out("drop") + "/logs/metrics.jsonl");
  ASSERT_EQ(a.size(), 16u);
  const double first = (a[0].loss + a[1].loss + a[2].loss) / 3;
  const double last = (a[13].loss + a[14].loss + a[15].loss) / 3;
  EXPECT_LT(last, first - 0.5) << "first " << first << " last " << last;
  nlohmann::json cfg =
      nlohmann::json::parse(ReadFile(Out("drop") + "/step_16/adapter_config.json"));
  EXPECT_EQ(cfg["lora_dropout"].get<double>(), 0.1);

  ProcessResult no_drop = RunTiny("no_drop", {"stop_after_steps=3"});
  ASSERT_EQ(no_drop.exit_code, 0) << no_drop.err;
  const std::vector<LogLine> z = ReadLog(Out("no_drop") + "/logs/metrics.jsonl");
  ASSERT_EQ(z.size(), 3u);
  // lora_b starts at 0 and the first step's lr is 0 (warmup), so the first two losses cannot
  // see the masks, but B's gradient does from the first step, and the third loss does.
  EXPECT_EQ(z[0].loss, a[0].loss);
  EXPECT_EQ(z[1].loss, a[1].loss);
  EXPECT_NE(z[0].grad_norm, a[0].grad_norm);
  EXPECT_NE(z[2].loss, a[2].loss);

  ProcessResult part = RunTiny("drop_resumed", {"model.lora_dropout=0.1", "stop_after_steps=5"});
  ASSERT_EQ(part.exit_code, 0) << part.err;
  part = RunTiny("drop_resumed", {"model.lora_dropout=0.1", "resume_from_checkpoint=true",
                                  "enable_activation_checkpointing=true"});
  ASSERT_EQ(part.exit_code, 0) << part.err;
  const std::vector<LogLine> b = ReadLog(Out("drop_resumed") + "/logs/metrics.jsonl");
  ASSERT_EQ(b.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(b[i].step, a[i].step);
    EXPECT_EQ(b[i].loss, a[i].loss) << "step " << a[i].step;  // bit-identical
    EXPECT_EQ(b[i].grad_norm, a[i].grad_norm) << "step " << a[i].step;
  }
  for (const char* file : {"adapter_model.safetensors", "model.safetensors"}) {
    EXPECT_EQ(ReadFile(Out("drop_resumed") + "/step_16/" + file),
              ReadFile(Out("drop") + "/step_16/" + file))
        << file;
  }
}

// bf16 weights (f32 adapter gradients and master copies): trains, resumes bit-identically, and
// the saved adapter and merged weights are bf16.
TEST_F(LoRAFinetuneRecipeTest, Bf16TrainsAndResumesExactly) {
  ProcessResult full = RunTiny("bf16", {"dtype=bf16", "epochs=1"});
  ASSERT_EQ(full.exit_code, 0) << full.err;
  const std::vector<LogLine> a = ReadLog(Out("bf16") + "/logs/metrics.jsonl");
  ASSERT_EQ(a.size(), 8u);
  EXPECT_LT(a[7].loss, a[0].loss - 0.5);
  ProcessResult part = RunTiny("bf16_resumed", {"dtype=bf16", "epochs=1", "stop_after_steps=5"});
  ASSERT_EQ(part.exit_code, 0) << part.err;
  part = RunTiny("bf16_resumed", {"dtype=bf16", "epochs=1", "resume_from_checkpoint=true"});
  ASSERT_EQ(part.exit_code, 0) << part.err;
  const std::vector<LogLine> b = ReadLog(Out("bf16_resumed") + "/logs/metrics.jsonl");
  ASSERT_EQ(b.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(b[i].loss, a[i].loss) << "step " << a[i].step;
    EXPECT_EQ(b[i].grad_norm, a[i].grad_norm) << "step " << a[i].step;
  }
  for (const char* file : {"adapter_model.safetensors", "model.safetensors"}) {
    EXPECT_EQ(ReadFile(Out("bf16_resumed") + "/step_8/" + file),
              ReadFile(Out("bf16") + "/step_8/" + file))
        << file;
  }
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
  ASSERT_EQ(ReadLog(Out("demo") + "/logs/metrics.jsonl").size(), 3u);
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
}  // namespace cctune
