// QLoRA through the LoRA recipe's binary (//recipes:lora_finetune_single_device), torchtune's
// way: a LoRA builder with quantize_base (the qlora_ builders) loads a full-precision HF
// checkpoint, quantizing the attention and MLP bases to NF4 while loading. On a tiny GQA model
// whose projections NF4 can hold: the loss falls, an interrupted and resumed run logs exactly
// the uninterrupted run's losses and ends with the same adapter and merged weights, and the
// merged weights saved (bf16) are the NF4-dequantized base plus alpha/rank · B·A, computed here
// from the base checkpoint with the NF4 kernel's fp64-checked quantizer.
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/hf.h"
#include "checkpoint/peft.h"
#include "core/tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/nf4.h"
#include "tests/llama2c_fixture.h"
#include "tests/recipe_test_util.h"

namespace cctune {
namespace testing {
namespace {

using ::testing::HasSubstr;

constexpr char kRecipe[] = "lora_finetune_single_device";

// Each q/k/v/o and MLP projection a whole number of NF4 groups (64 · 256 elements).
std::string ModelYaml(const std::string& extra) {
  return absl::StrCat(R"(model:
  _component_: cctune.models.tiny.lora_tiny_llama
  vocab_size: 264
  num_layers: 2
  num_heads: 4
  num_kv_heads: 2
  embed_dim: 256
  intermediate_dim: 512
  max_seq_len: 32
  lora_attn_modules: ['q_proj', 'v_proj', 'output_proj']
  apply_lora_to_mlp: true
  lora_rank: 8
  lora_alpha: 16
)",
                      extra);
}

std::string ConfigYaml(const std::string& out, const std::string& model_extra,
                       const std::string& checkpointer, int64_t samples) {
  return absl::StrCat("output_dir: ", out, "\n", ModelYaml(model_extra), ByteTokenizerYaml(32),
                      SyntheticDatasetYaml(samples, 5), checkpointer, R"(seed: 7
shuffle: true
batch_size: 8
epochs: 1
optimizer:
  _component_: torch.optim.AdamW
  lr: 0.01
)", JsonlLoggerYaml(), R"(log_every_n_steps: 1
dtype: bf16
device: cpu
)");
}

class QLoRAFinetuneRecipeTest : public ::testing::Test {
 protected:
  QLoRAFinetuneRecipeTest() : runs_(TestTempDir("qlora_finetune_recipe")) {}

  // A full-precision (bf16) base checkpoint: the merged weights of a one-step LoRA run from a
  // random init.
  std::string Base() {
    ProcessResult r = runs_.Run(kRecipe, "base", ConfigYaml(runs_.Out("base"), "",
                                                            "checkpointer: null\n", 8));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return runs_.Out("base") + "/step_1";
  }
  std::string QLoRAYaml(const std::string& name, const std::string& base) {
    return ConfigYaml(runs_.Out(name), "  quantize_base: true\n",
                      absl::StrCat("checkpointer:\n  _component_: "
                                   "torchtune.training.FullModelHFCheckpointer\n"
                                   "  checkpoint_dir: ",
                                   base, "\n  checkpoint_files: [model.safetensors]\n"
                                   "  output_dir: ${output_dir}\n  model_type: LLAMA3\n"),
                      64);
  }

  RecipeRuns runs_;
};

TEST_F(QLoRAFinetuneRecipeTest, TrainsResumesAndSavesTheDequantizedBasePlusAdapter) {
  const std::string base = Base();
  ExpectTrainsAndResumesExactly(
      runs_,
      [&](const std::string& name, const auto& o) {
        return runs_.Run(kRecipe, name, QLoRAYaml(name, base), o);
      },
      "qlora", {}, 8, 3, {"adapter_model.safetensors", "model.safetensors"});
  // The model line names the NF4 base: 2 layers x 7 projections.
  ProcessResult again = runs_.Run(kRecipe, "qlora_log", QLoRAYaml("qlora_log", base),
                                  {"stop_after_steps=1"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_THAT(again.err, HasSubstr("QLoRA: 14 base projections"));

  const std::string ckpt = runs_.Out("qlora") + "/step_8";
  absl::StatusOr<HfCheckpoint> b = LoadHfCheckpoint(base);
  ASSERT_TRUE(b.ok()) << b.status();
  absl::StatusOr<HfCheckpoint> merged = LoadHfCheckpoint(ckpt);
  ASSERT_TRUE(merged.ok()) << merged.status();
  absl::StatusOr<PeftAdapter> adapter = LoadPeftAdapter(ckpt, merged->config);
  ASSERT_TRUE(adapter.ok()) << adapter.status();
  ASSERT_EQ(merged->state_dict.size(), b->state_dict.size());
  const double scale = 16.0 / 8.0;
  int nf4 = 0, adapted = 0;
  for (const auto& [name, base_t] : b->state_dict) {
    const Tensor& merged_t = merged->state_dict.at(name);
    ASSERT_EQ(merged_t.dtype(), DType::kBF16) << name;  // torchtune saves QLoRA's in bf16
    const std::vector<double> w0 = ToDoubles(base_t), w1 = ToDoubles(merged_t);
    const bool quantized = name.find(".attn.") != std::string::npos ||
                           name.find(".mlp.") != std::string::npos;
    if (!quantized) {  // embeddings, norms: the base's, bit for bit
      EXPECT_EQ(w1, w0) << name;
      continue;
    }
    ++nf4;
    // What the NF4 base holds: the base quantized and dequantized (f32).
    std::vector<float> w0f(w0.begin(), w0.end());
    absl::StatusOr<cpu::Nf4Quantized> q = cpu::QuantizeNf4(w0f.data(), w0f.size(), name);
    ASSERT_TRUE(q.ok()) << q.status();
    std::vector<float> deq(w0f.size());
    cpu::DequantizeNf4(*q, deq.data());
    const std::string prefix = name.substr(0, name.size() - std::string(".weight").size());
    auto a_it = adapter->state_dict.find(prefix + ".lora_a.weight");
    std::vector<double> a, bb;
    int64_t rank = 0;
    if (a_it != adapter->state_dict.end()) {
      ++adapted;
      a = ToDoubles(a_it->second);
      bb = ToDoubles(adapter->state_dict.at(prefix + ".lora_b.weight"));
      rank = a_it->second.shape()[0];
    }
    const int64_t out = base_t.shape()[0], in = base_t.shape()[1];
    double max_err = 0, max_delta = 0, max_w = 0;
    for (int64_t o = 0; o < out; ++o) {
      for (int64_t i = 0; i < in; ++i) {
        double ba = 0;
        for (int64_t k = 0; k < rank; ++k) ba += bb[o * rank + k] * a[k * in + i];
        const double expected = deq[o * in + i] + scale * ba;
        max_delta = std::max(max_delta, std::abs(scale * ba));
        max_w = std::max(max_w, std::abs(expected));
        // bf16 rounding, twice where adapted (the dequantized base, then the merge): half an
        // ulp of each term.
        max_err = std::max(max_err, std::abs(w1[o * in + i] - expected) -
                                        std::pow(2.0, -8) * (std::abs(double{deq[o * in + i]}) +
                                                             std::abs(scale * ba) +
                                                             std::abs(expected)));
      }
    }
    EXPECT_LE(max_err, 1e-6 * max_w) << name;
    if (rank > 0) EXPECT_GT(max_delta, 1e-4) << name << ": the adapter did not train";
  }
  EXPECT_EQ(nf4, 2 * 7);
  EXPECT_EQ(adapted, 2 * 6);  // q, v, output_proj, w1, w2, w3
}

TEST_F(QLoRAFinetuneRecipeTest, AdapterOnlySavesNoMergedWeights) {
  const std::string base = Base();
  ProcessResult r = runs_.Run(kRecipe, "adapter_only", QLoRAYaml("adapter_only", base),
                              {"save_adapter_weights_only=true", "stop_after_steps=2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(Exists(runs_.Out("adapter_only") + "/step_2/adapter_model.safetensors"));
  EXPECT_FALSE(Exists(runs_.Out("adapter_only") + "/step_2/model.safetensors"));
}

TEST_F(QLoRAFinetuneRecipeTest, BadConfigsFailClearly) {
  // No checkpoint to quantize.
  ProcessResult r = runs_.Run(kRecipe, "no_ckpt",
                              ConfigYaml(runs_.Out("no_ckpt"), "  quantize_base: true\n",
                                         "checkpointer: null\n", 8));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("quantizes the checkpoint's base weights to NF4"));
  // Projections NF4 cannot hold (torchao's divisibility), named.
  r = runs_.Run(kRecipe, "small", QLoRAYaml("small", Base()),
                {"model.embed_dim=32", "model.intermediate_dim=64"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("q_proj.weight [32, 32] has 1024 elements"));
  // torchtune's memory-mapped save is not implemented: refused, not ignored.
  r = runs_.Run(kRecipe, "low_ram", QLoRAYaml("low_ram", Base()), {"low_cpu_ram=true"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("low_cpu_ram: true"));
}

}  // namespace
}  // namespace testing
}  // namespace cctune
