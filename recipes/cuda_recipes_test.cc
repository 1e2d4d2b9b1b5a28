// Both fine-tune recipes (LoRA also with dropout) with `device: cuda`, in process, on a tiny
// GQA model and the synthetic arithmetic dataset: the per-step losses and gradient norms match
// the same run on the CPU, the logs carry the device's peak memory, and a run stopped on cuda
// and resumed on cuda (weights, optimizer state and LoRA adapters written to the host and
// loaded back onto the device) ends with the weights of the CPU run. Skips without a usable
// CUDA device; on a machine without a GPU it runs under the emulator:
//   export CCTUNE_EMU_TESTS=recipes/cuda_recipes_test
//   export CCTUNE_EMU_EXTRA="checkpoint config data distributed generation modules models/...
//     recipes tests tokenizers training"
//   kernels/cuda/emu/run_emu.sh
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/hf.h"
#include "config/config.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_test_util.h"
#include "recipes/full_finetune_single_device.h"
#include "recipes/lora_finetune_single_device.h"
#include "tests/recipe_test_util.h"

namespace cctune {
namespace {

using testing::LogLine;
using testing::ReadLog;

constexpr double kLr = 0.01;
constexpr int kSteps = 3;

// The recipes under test: full fine-tune, LoRA, LoRA with dropout (its masks are a function of
// the seed and offset, the same on both devices).
enum class Recipe { kFull, kLoRA, kLoRADropout };

std::string ConfigYaml(const std::string& out, Recipe recipe, const std::string& device) {
  return absl::StrCat("output_dir: ", out, "\nmodel:\n  _component_: cctune.models.tiny.",
                      recipe == Recipe::kFull
                          ? "tiny_llama\n"
                          : "lora_tiny_llama\n  lora_attn_modules: [q_proj, v_proj]\n"
                            "  apply_lora_to_mlp: true\n  lora_rank: 2\n  lora_alpha: 4.0\n",
                      recipe == Recipe::kLoRADropout ? "  lora_dropout: 0.25\n" : "",
                      R"(  vocab_size: 264
  num_layers: 2
  num_heads: 4
  num_kv_heads: 2
  embed_dim: 16
  intermediate_dim: 32
  max_seq_len: 16
)",
                      testing::ByteTokenizerYaml(16), R"(dataset:
  _component_: cctune.data.synthetic_arithmetic
  num_samples: 12
  seed: 5
  max_digits: 1
seed: 7
batch_size: 2
epochs: 1
max_steps_per_epoch: )",
                      kSteps, R"(
gradient_accumulation_steps: 2
clip_grad_norm: 1.0
optimizer:
  _component_: torch.optim.AdamW
  lr: )",
                      kLr, "\n", testing::JsonlLoggerYaml(), "dtype: fp32\ndevice: ", device, "\n");
}

const char* RecipeName(Recipe r) {
  return r == Recipe::kFull ? "full" : r == Recipe::kLoRA ? "lora" : "lora_dropout";
}

class CudaRecipesTest : public ::testing::TestWithParam<Recipe> {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    dir_ = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/cuda_recipes_test_",
                        RecipeName(GetParam()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  absl::Status Run(const std::string& name, const std::string& device,
                   const std::vector<std::string>& overrides) {
    CCTUNE_ASSIGN_OR_RETURN(Config config,
                            Config::FromString(ConfigYaml(Out(name), GetParam(), device)));
    CCTUNE_RETURN_IF_ERROR(config.ApplyOverrides(overrides));
    CCTUNE_RETURN_IF_ERROR(config.Resolve());
    return (GetParam() == Recipe::kFull ? FullFinetuneRecipe() : LoRAFinetuneRecipe()).run(config);
  }
  std::string Out(const std::string& name) const { return absl::StrCat(dir_, "/", name); }
  std::string dir_;
};

TEST_P(CudaRecipesTest, MatchesCpuAndResumesOnCuda) {
  CCTUNE_SKIP_WITHOUT_CUDA();
  const char* recipe = RecipeName(GetParam());
  CCTUNE_ASSERT_OK(Run("cpu", "cpu", {}));
  CCTUNE_ASSERT_OK(Run("cuda", "cuda", {"stop_after_steps=2"}));
  CCTUNE_ASSERT_OK(Run("cuda", "cuda:0", {"resume_from_checkpoint=true"}));
  const std::vector<LogLine> a = ReadLog(Out("cpu") + "/logs/metrics.jsonl");
  const std::vector<LogLine> b = ReadLog(Out("cuda") + "/logs/metrics.jsonl");
  ASSERT_EQ(a.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(b.size(), a.size());
  // As training/cuda_train_test.cc: f32 on both devices, different summation orders, so
  // losses and norms agree to ~1e-7 relative; 1e-5 leaves room.
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(b[i].loss, a[i].loss, 1e-5 * a[i].loss) << recipe << " step " << i + 1;
    EXPECT_NEAR(b[i].grad_norm, a[i].grad_norm, 1e-5 * a[i].grad_norm)
        << recipe << " step " << i + 1;
    EXPECT_GT(b[i].peak_memory_gb, 0) << recipe << ": the cuda allocator's peak";
  }
  // Final merged HF weights (LoRA: base + scaled B·A). The same bounds as the training test:
  // within 1e-3·lr + 1e-5 relative but for Adam's sign flips on near-zero gradients, which
  // stay within the ~lr per step that Adam can move a weight.
  absl::StatusOr<HfCheckpoint> wa = LoadHfCheckpoint(Out("cpu") + "/step_3");
  absl::StatusOr<HfCheckpoint> wb = LoadHfCheckpoint(Out("cuda") + "/step_3");
  ASSERT_TRUE(wa.ok()) << wa.status();
  ASSERT_TRUE(wb.ok()) << wb.status();
  ASSERT_EQ(wa->state_dict.size(), wb->state_dict.size());
  int64_t total = 0, outliers = 0;
  double max_diff = 0;
  for (const auto& [name, t] : wa->state_dict) {
    ASSERT_EQ(wb->state_dict.count(name), 1u) << name;
    const std::vector<double> x = ValueOrDie(t.ToDoubleVector());
    const std::vector<double> y = ValueOrDie(wb->state_dict.at(name).ToDoubleVector());
    ASSERT_EQ(x.size(), y.size()) << name;
    for (size_t i = 0; i < x.size(); ++i) {
      const double d = std::fabs(x[i] - y[i]);
      max_diff = std::max(max_diff, d);
      ++total;
      if (!(d <= 1e-3 * kLr + 1e-5 * std::fabs(x[i]))) ++outliers;
      ASSERT_LE(d, 2.1 * kLr * kSteps + 1e-5 * std::fabs(x[i])) << recipe << " " << name << "["
                                                                 << i << "]";
    }
  }
  EXPECT_LE(outliers, total / 100) << recipe;
  std::printf("[ %s ] cuda (stopped at 2, resumed) vs cpu: %d steps, max loss rel diff %.3g, "
              "max |weight diff| %.3g, %lld of %lld weights beyond 1e-3*lr\n",
              recipe, kSteps,
              [&] {
                double m = 0;
                for (size_t i = 0; i < a.size(); ++i) {
                  m = std::max(m, std::fabs(b[i].loss - a[i].loss) / a[i].loss);
                }
                return m;
              }(),
              max_diff, static_cast<long long>(outliers), static_cast<long long>(total));
}

INSTANTIATE_TEST_SUITE_P(Recipes, CudaRecipesTest,
                         ::testing::Values(Recipe::kFull, Recipe::kLoRA, Recipe::kLoRADropout),
                         [](const ::testing::TestParamInfo<Recipe>& info) {
                           return std::string(RecipeName(info.param));
                         });

}  // namespace
}  // namespace cctune
