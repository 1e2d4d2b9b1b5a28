// Every recipe binary with every tokenizer type, as real subprocesses: generate,
// full_finetune_single_device and lora_finetune_single_device, each run directly and through
// `cctune run <recipe>`, with tiktoken (Llama 3), SentencePiece (Llama 2, and Mistral's with
// its [INST] template), Qwen2.5's byte-level BPE (ChatML), llama2.c and the byte tokenizer. A
// link-level clash (as libsentencepiece's protobuf-lite against libprotobuf once aborted every
// fine-tune given a .model) fails here at start-up, whatever the unit tests say. Each
// fine-tune runs one step on a tiny random model and an instruct dataset written here;
// generate then writes a few tokens from that step's checkpoint. All tokenizer files are built
// by the test or committed (tests/assets/tokenizers/sp_bpe.model, qwen_bpe_*), so nothing
// skips.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/llama2c_fixture.h"
#include "tests/recipe_test_util.h"

namespace cctune {
namespace testing {
namespace {

using ::testing::HasSubstr;

// A tiny byte-level tiktoken file: the 256 bytes, then a few merges. With Llama 3's 256
// special tokens after them, the vocabulary is 256 + merges + 256.
int WriteTinyTiktoken(const std::string& path) {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, static_cast<char>(b)));
  for (const char* m : {"th", "he", "in", "er", "an", " t", " a", "at", "on", "en", "the",
                        " the", "ing", " c", " s", "is", " is", "ca", " cat", "es"}) {
    tokens.push_back(m);
  }
  std::ofstream out(path, std::ios::binary);
  for (size_t rank = 0; rank < tokens.size(); ++rank) {
    out << absl::Base64Escape(tokens[rank]) << " " << rank << "\n";
  }
  return static_cast<int>(tokens.size()) + 256;
}

struct TokenizerCase {
  std::string name;
  std::string yaml;  // the tokenizer: block, indented
  int vocab_size;    // the model's, equal to the tokenizer's
};

class TokenizerRecipesTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = testing::TestTempDir("tokenizer_recipes_" + GetParam());
    const std::string name = GetParam();
    if (name == "tiktoken") {
      const std::string path = dir_ + "/tiktoken.model";
      const int vocab = WriteTinyTiktoken(path);
      case_ = {name, "  _component_: cctune.models.llama3.llama3_tokenizer\n  path: " + path +
                         "\n  max_seq_len: 48\n",
               vocab};
    } else if (name == "sentencepiece") {
      case_ = {name,
               "  _component_: cctune.models.llama2.llama2_tokenizer\n  path: " +
                   RunfilePath("tests/assets/tokenizers/sp_bpe.model") + "\n  max_seq_len: 48\n",
               400};
    } else if (name == "mistral") {
      // Mistral's SentencePiece tokenizer with its [INST] template (torchtune's default).
      case_ = {name,
               "  _component_: torchtune.models.mistral.mistral_tokenizer\n  path: " +
                   RunfilePath("tests/assets/tokenizers/sp_bpe.model") + "\n  max_seq_len: 48\n",
               400};
    } else if (name == "qwen2_5") {
      // Byte-level BPE with ChatML; the special tokens (ids 1000..1021) from a tokenizer.json.
      case_ = {name,
               "  _component_: torchtune.models.qwen2_5.qwen2_5_tokenizer\n  path: " +
                   RunfilePath("tests/assets/tokenizers/qwen_bpe_vocab.json") +
                   "\n  merges_file: " + RunfilePath("tests/assets/tokenizers/qwen_bpe_merges.txt") +
                   "\n  special_tokens_path: " +
                   RunfilePath("tests/assets/tokenizers/qwen_bpe_tokenizer.json") +
                   "\n  max_seq_len: 48\n",
               1022};
    } else if (name == "llama2c") {
      ASSERT_TRUE(testing::WriteLlama2cFixture(dir_).ok());  // tok.bin has 300 tokens
      case_ = {name,
               "  _component_: cctune.models.llama2c.llama2c_tokenizer\n  path: " + dir_ +
                   "/tok.bin\n  max_seq_len: 48\n",
               300};
    } else {
      case_ = {name, "  _component_: cctune.data.byte_tokenizer\n  max_seq_len: 48\n", 264};
    }
    // Instruct data with multi-byte text, so byte fallback and merges both take part.
    data_ = dir_ + "/data.jsonl";
    std::ofstream data(data_);
    const char* const kRows[][2] = {
        {"what is the cat doing?", "the cat sleeps on the mat."},
        {"name a colour", "green, like a leaf"},
        {"say hello in French", "bonjour, \xC3\xA7" "a va?"},
        {"write 1+2", "3"},
        {"translate water", "\xE6\xB0\xB4 (shui)"},
        {"is the sky blue?", "yes, on a clear day"},
        {"count to three", "one two three"},
        {"an emoji please", "\xF0\x9F\x99\x82"},
    };
    for (const auto& row : kRows) {
      data << nlohmann::json({{"input", row[0]}, {"output", row[1]}}).dump() << "\n";
    }
  }

  std::string ModelYaml(bool lora) const {
    std::string y = absl::StrCat("model:\n  _component_: cctune.models.tiny.",
                                 lora ? "lora_tiny_llama" : "tiny_llama", "\n  vocab_size: ",
                                 case_.vocab_size, R"(
  num_layers: 1
  num_heads: 2
  num_kv_heads: 1
  embed_dim: 16
  intermediate_dim: 32
  max_seq_len: 64
)");
    if (lora) {
      y += R"(  lora_attn_modules: ['q_proj', 'v_proj']
  apply_lora_to_mlp: false
  apply_lora_to_output: false
  lora_rank: 2
  lora_alpha: 4
  lora_dropout: 0.0
)";
    }
    return y;
  }

  // A one-step fine-tune config writing to `out`.
  std::string FinetuneConfig(const std::string& out, bool lora) const {
    const std::string path = out + ".yaml";
    std::ofstream(path) << "output_dir: " << out << "\n"
                        << ModelYaml(lora) << "tokenizer:\n"
                        << case_.yaml << "dataset:\n  _component_: cctune.datasets.instruct_dataset\n"
                        << "  source: " << data_ << R"(
seed: 7
shuffle: false
batch_size: 2
epochs: 1
max_steps_per_epoch: 1
optimizer:
  _component_: torch.optim.AdamW
  lr: 0.01
loss:
  _component_: torchtune.modules.loss.CEWithChunkedOutputLoss
metric_logger:
  _component_: torchtune.training.metric_logging.JsonlLogger
  log_dir: ${output_dir}/logs
log_every_n_steps: 1
dtype: fp32
device: cpu
)";
    return path;
  }

  // Greedy generation of a few tokens from the checkpoint in `ckpt_dir`.
  std::string GenerateConfig(const std::string& ckpt_dir, const std::string& name) const {
    const std::string path = dir_ + "/" + name + ".yaml";
    std::ofstream(path) << "output_dir: " << dir_ << "/" << name << "\n"
                        << ModelYaml(false) << "checkpointer:\n"
                        << "  _component_: torchtune.training.FullModelHFCheckpointer\n"
                        << "  checkpoint_dir: " << ckpt_dir << "\n"
                        << "  checkpoint_files: [model.safetensors]\n"
                        << "  output_dir: ${output_dir}\n  model_type: LLAMA3\n"
                        << "tokenizer:\n"
                        << case_.yaml << R"(device: cpu
dtype: fp32
seed: 3
prompt:
  system: null
  user: "the cat"
max_new_tokens: 4
temperature: 0.0
top_k: null
top_p: 1.0
enable_kv_cache: true
kv_cache_layout: grouped
quantizer: null
)";
    return path;
  }

  // The recipe binary itself, or `cctune run <recipe>`.
  ProcessResult Run(const std::string& recipe, const std::string& config, bool via_cli) const {
    return RunProcess(RecipeArgv(recipe, config, {}, via_cli));
  }

  // Runs a one-step fine-tune and checks its loss and checkpoint; returns the checkpoint dir.
  std::string CheckFinetune(const std::string& recipe, bool lora, bool via_cli) {
    const std::string what = absl::StrCat(via_cli ? "cctune run " : "", recipe, " with ",
                                          case_.name);
    const std::string out = absl::StrCat(dir_, "/", recipe, via_cli ? "_cli" : "");
    const ProcessResult r = Run(recipe, FinetuneConfig(out, lora), via_cli);
    EXPECT_EQ(r.exit_code, 0) << what << "\nstderr:\n" << r.err;
    if (r.exit_code != 0) return "";
    // (The progress bar, with the loss, is drawn only on a terminal; the metric log has it.)
    EXPECT_THAT(r.err, HasSubstr("8 samples, 1 steps per epoch")) << what;
    EXPECT_THAT(r.err, HasSubstr("Saved checkpoint " + out + "/step_1")) << what;
    // The loss of the one step, logged and finite.
    const std::vector<LogLine> log = ReadLog(out + "/logs/metrics.jsonl");
    EXPECT_EQ(log.size(), 1u) << what;
    for (const LogLine& l : log) {
      EXPECT_TRUE(std::isfinite(l.loss) && l.loss > 0) << what << ": loss " << l.loss;
    }
    const std::string latest(absl::StripSuffix(ReadFile(out + "/LATEST"), "\n"));
    EXPECT_EQ(latest, "step_1") << what;
    const std::string ckpt = out + "/" + latest;
    EXPECT_TRUE(Exists(ckpt + "/model.safetensors")) << what;
    EXPECT_TRUE(Exists(ckpt + "/recipe_state.safetensors")) << what;
    if (lora) {
      EXPECT_TRUE(Exists(ckpt + "/adapter_model.safetensors")) << what;
    }
    return ckpt;
  }

  void CheckGenerate(const std::string& ckpt, bool via_cli) {
    const std::string what = absl::StrCat(via_cli ? "cctune run " : "", "generate with ",
                                          case_.name);
    const ProcessResult r =
        Run("generate", GenerateConfig(ckpt, via_cli ? "generate_cli" : "generate"), via_cli);
    EXPECT_EQ(r.exit_code, 0) << what << "\nstderr:\n" << r.err;
    // stdout: the prompt's text and what followed; stderr: the timing summary.
    EXPECT_THAT(r.out, HasSubstr("the cat")) << what;
    EXPECT_GT(r.out.size(), std::string("the cat\n").size()) << what << ": nothing generated";
    EXPECT_THAT(r.err, HasSubstr("tokens/sec")) << what;
  }

  std::string dir_;
  std::string data_;
  TokenizerCase case_;
};

TEST_P(TokenizerRecipesTest, EveryRecipeRunsDirectlyAndThroughTheCli) {
  for (const bool via_cli : {false, true}) {
    const std::string ckpt = CheckFinetune("full_finetune_single_device", false, via_cli);
    CheckFinetune("lora_finetune_single_device", true, via_cli);
    ASSERT_FALSE(ckpt.empty());
    CheckGenerate(ckpt, via_cli);
  }
}

INSTANTIATE_TEST_SUITE_P(AllTokenizers, TokenizerRecipesTest,
                         ::testing::Values("tiktoken", "sentencepiece", "mistral", "qwen2_5",
                                           "llama2c", "byte"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace
}  // namespace testing
}  // namespace cctune
