// The committed demo model (tests/assets/demo, trained by configs/demo/full_finetune.yaml)
// adds two-digit numbers: greedy decoding on held-out prompts (sample indices the training set
// never used) gives the right sum, checked against plain integer addition.
// CCTUNE_DEMO_MODEL_DIR scores another checkpoint folder of the same shape (a retrained one:
// `bazel test //tests:demo_model_test --test_env=CCTUNE_DEMO_MODEL_DIR=/abs/path/step_1248`).
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/hf.h"
#include "core/random.h"
#include "data/dataset_components.h"
#include "generation/generate.h"
#include "generation/model_loader.h"
#include "gtest/gtest.h"
#include "models/tiny/tiny.h"
#include "tokenizers/byte_tokenizer.h"

namespace cctune {
namespace {

TEST(DemoModelTest, AddsHeldOutNumbers) {
  const char* dir_env = std::getenv("CCTUNE_DEMO_MODEL_DIR");
  const std::string dir = dir_env != nullptr && *dir_env != '\0' ? dir_env : "tests/assets/demo";
  absl::StatusOr<HfCheckpoint> hf = LoadHfCheckpoint(dir);
  ASSERT_TRUE(hf.ok()) << hf.status();
  const HfModelConfig& c = hf->config;
  auto model = TinyLlama(c.vocab_size, c.num_hidden_layers, c.num_attention_heads,
                         c.num_key_value_heads, c.hidden_size, c.intermediate_size,
                         c.max_position_embeddings, c.tie_word_embeddings);
  ASSERT_TRUE(model.ok()) << model.status();
  auto arena = LoadWeights(**model, hf->state_dict, DType::kF32, Device::Cpu());
  ASSERT_TRUE(arena.ok()) << arena.status();

  ByteTokenizer tok;
  const int kSamples = 500;
  int correct = 0;
  for (int i = 0; i < kSamples; ++i) {
    // Held out: the training set used indices [0, 20000) of seed 1.
    auto [prompt, answer] = SyntheticArithmeticText(1, 5000000 + i, 2);
    std::vector<int32_t> ids = tok.Encode(prompt, /*add_bos=*/true, /*add_eos=*/false);
    auto prompt_tensor = LeftPad({ids}, -1);
    ASSERT_TRUE(prompt_tensor.ok());
    GenerateOptions options;
    options.max_new_tokens = 5;
    options.pad_id = -1;
    options.sampling.temperature = 0;  // greedy
    options.stop_tokens = {ByteTokenizer::kEos};
    Generator gen(0);
    auto result = Generate(**model, *prompt_tensor, options, gen);
    ASSERT_TRUE(result.ok()) << result.status();
    std::vector<int32_t> out = result->generated[0];
    if (!out.empty() && out.back() == ByteTokenizer::kEos) out.pop_back();
    auto text = tok.Decode(out);
    ASSERT_TRUE(text.ok());
    // Independent reference: the sum of the two operands parsed from the prompt.
    const size_t plus = prompt.find('+');
    const long expected = std::stol(prompt.substr(0, plus)) +
                          std::stol(prompt.substr(plus + 1, prompt.size() - plus - 2));
    EXPECT_EQ(answer, absl::StrCat(expected));
    if (*text == absl::StrCat(expected)) ++correct;
  }
  std::printf("demo accuracy (%s): %d / %d\n", dir.c_str(), correct, kSamples);
  EXPECT_GE(correct, 450) << "demo model accuracy " << correct << "/" << kSamples;
}

}  // namespace
}  // namespace cctune
