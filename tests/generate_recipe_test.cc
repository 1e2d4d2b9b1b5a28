// The generate recipe end to end, through its binary (//recipes:generate) and through
// `cctune run generate`: stdout carries only the decoded text, stderr the resolved config and
// the metric lines.
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/random.h"
#include "generation/generate.h"
#include "generation/model_loader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/llama2c_fixture.h"
#include "tests/subprocess.h"
#include "tests/util/shared_dir.h"
#include "tokenizers/llama2c.h"

namespace cctune {
namespace testing {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;

// The value of the KV-cache line's byte count, or -1.
int64_t KvBytes(const std::string& err) {
  std::smatch m;
  if (!std::regex_search(err, m, std::regex("\nKV cache: (\\d+) bytes"))) return -1;
  return std::stoll(m[1]);
}

void ExpectMetricLines(const std::string& err) {
  EXPECT_THAT(err, ContainsRegex("\nTime for inference: [0-9]+\\.[0-9][0-9] sec total, "
                                 "[0-9]+\\.[0-9][0-9] tokens/sec\n"));
  EXPECT_THAT(err, ContainsRegex("\nBandwidth achieved: [0-9]+\\.[0-9][0-9] GB/s\n"));
  // 3 significant digits: "0.123", "11.4", "1040" (generation/generate.h).
  const std::string sig3 = "([0-9]\\.[0-9][0-9]|[1-9][0-9]\\.[0-9]|[1-9][0-9][0-9]+|0\\.0*[1-9][0-9][0-9])";
  EXPECT_THAT(err, ContainsRegex("\nPrefill: [0-9]+ tokens, " + sig3 +
                                 " sec \\(time to first token\\), " + sig3 + " tokens/sec\n"));
  EXPECT_THAT(err, ContainsRegex("\nDecode: ([0-9]+ tokens, " + sig3 + " sec, " + sig3 +
                                 " tokens/sec, " + sig3 +
                                 " GB/s|0 tokens \\(only the first token was generated\\))\n"));
  EXPECT_THAT(err, ContainsRegex("\nMemory used: [0-9]+\\.[0-9][0-9] GB\n"));
  EXPECT_THAT(err, ContainsRegex("\nKV cache: [0-9]+ bytes \\([0-9]+\\.[0-9][0-9] GB\\), layout "
                                 "(grouped|expanded|none)"));
}

class GenerateRecipeFixtureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::TestTempDir("generate_recipe_fixture");
    ASSERT_TRUE(testing::WriteLlama2cFixture(dir_).ok());
    // The built-in llama2.c config, pointed at the fixture files.
    base_ = {"--config",
             "llama2c/generation",
             "checkpointer.checkpoint_dir=" + dir_,
             "checkpointer.checkpoint_files=[model.bin]",
             "tokenizer.path=" + dir_ + "/tok.bin",
             "temperature=0",
             "max_new_tokens=20"};
  }

  // What the library generates for `prompt` (greedy), decoded like the recipe: the prompt
  // followed by the generated text, then a newline.
  std::string Expected(const std::string& prompt, int64_t max_new_tokens) {
    LoadedModel m = ValueOrDie(LoadLlama2cModel(dir_ + "/model.bin"));
    auto tok = ValueOrDie(Llama2cTokenizer::Load(dir_ + "/tok.bin"));
    std::vector<int32_t> ids = tok->Encode(prompt, /*add_bos=*/true, /*add_eos=*/false);
    GenerateOptions opts;
    opts.max_new_tokens = max_new_tokens;
    opts.sampling.temperature = 0.f;
    opts.pad_id = -1;
    opts.stop_tokens.assign(tok->stop_tokens().begin(), tok->stop_tokens().end());
    Generator gen(0);
    GenerateResult out = ValueOrDie(Generate(*m.model, ValueOrDie(LeftPad({ids}, -1)), opts, gen));
    ids.insert(ids.end(), out.generated[0].begin(), out.generated[0].end());
    return ValueOrDie(tok->Decode(ids)) + "\n";
  }

  ProcessResult RunRecipe(std::vector<std::string> extra) {
    std::vector<std::string> argv = {RunfilePath("recipes/generate")};
    argv.insert(argv.end(), base_.begin(), base_.end());
    argv.insert(argv.end(), extra.begin(), extra.end());
    return RunProcess(argv);
  }

  std::string dir_;
  std::vector<std::string> base_;
};

TEST_F(GenerateRecipeFixtureTest, StdoutIsTheTextAndStderrHasTheMetrics) {
  ProcessResult r = RunRecipe({"prompt.user=the cat"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, Expected("the cat", 20));
  EXPECT_THAT(r.out, Not(HasSubstr("Time for inference")));
  // stderr: the resolved config first (interpolations resolved), then the metrics.
  EXPECT_THAT(r.err, HasSubstr("tokenizer:\n  _component_: cctune.models.llama2c.llama2c_tokenizer"
                               "\n  path: " +
                               dir_ + "/tok.bin"));
  EXPECT_LT(r.err.find("max_new_tokens: 20"), r.err.find("Time for inference"));
  ExpectMetricLines(r.err);
  // 2 (k, v) x 2 layers x 2 KV heads x (prompt + 20) positions x head_dim 8 x 4 bytes.
  auto tok = ValueOrDie(Llama2cTokenizer::Load(dir_ + "/tok.bin"));
  const int64_t positions = tok->Encode("the cat", true, false).size() + 20;
  EXPECT_EQ(KvBytes(r.err), 2 * 2 * 2 * positions * 8 * 4);
  EXPECT_THAT(r.err, HasSubstr("layout grouped, 2 layers x 2 heads x"));
}

TEST_F(GenerateRecipeFixtureTest, LayoutsAndNoCacheGiveTheSameText) {
  ProcessResult grouped = RunRecipe({"prompt.user=and then", "kv_cache_layout=grouped"});
  ProcessResult expanded = RunRecipe({"prompt.user=and then", "kv_cache_layout=expanded"});
  ProcessResult no_cache = RunRecipe({"prompt.user=and then", "enable_kv_cache=false"});
  ASSERT_EQ(grouped.exit_code, 0) << grouped.err;
  ASSERT_EQ(expanded.exit_code, 0) << expanded.err;
  ASSERT_EQ(no_cache.exit_code, 0) << no_cache.err;
  EXPECT_EQ(grouped.out, Expected("and then", 20));
  EXPECT_EQ(expanded.out, grouped.out);
  EXPECT_EQ(no_cache.out, grouped.out);
  // n_h / n_kv = 4 / 2.
  EXPECT_EQ(KvBytes(expanded.err), 2 * KvBytes(grouped.err));
  EXPECT_THAT(expanded.err, HasSubstr("layout expanded, 2 layers x 4 heads x"));
  EXPECT_THAT(no_cache.err, HasSubstr("KV cache: 0 bytes (0.00 GB), layout none"));
  ExpectMetricLines(no_cache.err);
}

TEST_F(GenerateRecipeFixtureTest, CopiedAndViewedWeightsGiveTheSameText) {
  // The llama2.c fixture is f32, as the run: `view` (the default) maps it, `copy` copies it.
  ProcessResult copied = RunRecipe({"prompt.user=the cat", "load_weights=copy"});
  ProcessResult viewed = RunRecipe({"prompt.user=the cat"});
  ASSERT_EQ(copied.exit_code, 0) << copied.err;
  ASSERT_EQ(viewed.exit_code, 0) << viewed.err;
  EXPECT_EQ(viewed.out, copied.out);
  EXPECT_EQ(copied.out, Expected("the cat", 20));
  // (The fixture is a few KB: the load line's GB figures read 0.00 either way.)
  ProcessResult bad = RunRecipe({"load_weights=mmap"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_THAT(bad.err, HasSubstr("load_weights"));
}

// profile=true: the same text, and per phase one line per kind of op that ran (the GEMMs
// with their GFLOP/s) plus the untimed rest; the fixture model's 2 layers run 7 GEMMs each
// (q, k, v, o, w1, w3, w2: an fp32 llama2.c file, viewed, not fused) and the output
// projection in every pass.
TEST_F(GenerateRecipeFixtureTest, ProfileSplitsPrefillAndDecodeByKindOfOp) {
  ProcessResult plain = RunRecipe({"prompt.user=the cat"});
  ProcessResult prof = RunRecipe({"prompt.user=the cat", "profile=true"});
  ASSERT_EQ(prof.exit_code, 0) << prof.err;
  EXPECT_EQ(prof.out, plain.out);
  EXPECT_THAT(plain.err, Not(HasSubstr("Profile ")));
  for (const char* phase : {"prefill", "decode"}) {
    const std::string p = std::string("Profile ") + phase + ": ";
    EXPECT_THAT(prof.err, HasSubstr(p + "gemm forward (x.W^T) ")) << phase;
    EXPECT_THAT(prof.err, HasSubstr(p + "attention forward ")) << phase;
    EXPECT_THAT(prof.err, HasSubstr(p + "elementwise forward ")) << phase;
    EXPECT_THAT(prof.err, HasSubstr(p + "untimed ")) << phase;
  }
  const size_t at = prof.err.find("Profile prefill: gemm forward (x.W^T) ");
  ASSERT_NE(at, std::string::npos);
  const std::string line = prof.err.substr(at, prof.err.find('\n', at) - at);
  EXPECT_THAT(line, HasSubstr(" 15 calls, ")) << line;
  EXPECT_THAT(line, HasSubstr(" GFLOP/s")) << line;
  // 19 decode passes of the same 15 GEMMs.
  EXPECT_THAT(prof.err, HasSubstr("Profile decode: gemm forward (x.W^T) ")) << prof.err;
  EXPECT_THAT(prof.err, HasSubstr(" 285 calls, ")) << prof.err;
}

TEST_F(GenerateRecipeFixtureTest, SameSeedSameTextDifferentSeedDifferentText) {
  std::vector<std::string> sampling = {"prompt.user=the", "temperature=1.0", "top_k=50",
                                       "top_p=0.95", "max_new_tokens=40"};
  auto with_seed = [&](int seed) {
    std::vector<std::string> args = sampling;
    args.push_back(absl::StrCat("seed=", seed));
    return RunRecipe(args);
  };
  ProcessResult a = with_seed(1), b = with_seed(1), c = with_seed(2);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  EXPECT_NE(a.out, c.out);
  EXPECT_NE(a.out, Expected("the", 40));  // not greedy
}

TEST_F(GenerateRecipeFixtureTest, CctuneRunGenerateIsTheSameRecipe) {
  std::vector<std::string> argv = {RunfilePath("recipes/cctune"), "run", "generate"};
  argv.insert(argv.end(), base_.begin(), base_.end());
  argv.push_back("prompt.user=the cat");
  ProcessResult r = RunProcess(argv);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, Expected("the cat", 20));
  ExpectMetricLines(r.err);
}

TEST_F(GenerateRecipeFixtureTest, ConfigFileWithOverrides) {
  // A user's copy of a config, relative paths resolved against the working directory.
  const std::string cfg = dir_ + "/my_generation.yaml";
  std::ofstream(cfg) << "model:\n  _component_: torchtune.models.llama2c.llama2c\n"
                        "checkpointer:\n  _component_: cctune.training.Llama2cCheckpointer\n"
                        "  checkpoint_dir: .\n  checkpoint_files: [model.bin]\n"
                        "tokenizer:\n  _component_: torchtune.models.llama2c.llama2c_tokenizer\n"
                        "  path: ./tok.bin\n"
                        "prompt:\n  user: the cat\n"
                        "max_new_tokens: 5\ntemperature: 0.0\n";
  ProcessResult r =
      RunProcess({RunfilePath("recipes/generate"), "--config", cfg, "max_new_tokens=20"}, dir_);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, Expected("the cat", 20));
}

TEST_F(GenerateRecipeFixtureTest, ErrorsGoToStderrWithNonZeroExit) {
  ProcessResult r = RunRecipe({"max_new_tokens=100"});  // 64 positions in the fixture model
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(r.err, HasSubstr("max_seq_len (64)"));

  r = RunRecipe({"quantizer={_component_: x}"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("quantizer"));

  r = RunRecipe({"device=tpu"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("tpu"));

  r = RunProcess({RunfilePath("recipes/generate")});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("usage: generate --config"));

  r = RunProcess({RunfilePath("recipes/generate"), "--config", "no/such_config"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, HasSubstr("llama2c/generation"));  // lists the built-in names
}

// stories260K through the recipe binary and the built-in config: run.c's output exactly.
class GenerateRecipeStories260KTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto bin = testing::SharedFile("models/stories260K/stories260K.bin");
    if (!bin.ok()) GTEST_SKIP() << bin.status();
    auto tok_path = testing::SharedFile("models/stories260K/tok512.bin");
    if (!tok_path.ok()) GTEST_SKIP() << tok_path.status();
    shared_ = ValueOrDie(testing::SharedDir());
    tok_ = ValueOrDie(Llama2cTokenizer::Load(*tok_path));
  }

  // run.c -t 0 -n steps -i prompt.
  ProcessResult RunC(const std::string& prompt, int64_t steps,
                     std::vector<std::string> extra = {}) {
    const int64_t prompt_tokens = tok_->Encode(prompt, true, false).size();
    std::vector<std::string> argv = {
        RunfilePath("recipes/generate"), "--config", "llama2c/generation", "shared_dir=" + shared_,
        // '' keeps an empty prompt a string (not null)
        "prompt.user=" + (prompt.empty() ? "''" : prompt), "temperature=0",
        absl::StrCat("max_new_tokens=", steps + 1 - prompt_tokens)};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return RunProcess(argv);
  }

  std::string Reference(const std::string& name) {
    return ReadFile(shared_ + "/models/stories260K/reference/" + name);
  }

  std::string shared_;
  std::unique_ptr<Llama2cTokenizer> tok_;
};

TEST_F(GenerateRecipeStories260KTest, ZooMatchesRunC) {
  ProcessResult r = RunC("Zoo", 60);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, Reference("greedy_zoo_steps60.txt"));
  ExpectMetricLines(r.err);
}

TEST_F(GenerateRecipeStories260KTest, GreedyFromBosMatchesRunC) {
  for (const char* layout : {"kv_cache_layout=grouped", "kv_cache_layout=expanded"}) {
    ProcessResult r = RunC("", 200, {layout});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, Reference("greedy_steps200.txt")) << layout;
  }
}

// The README's main command: the demo model (trained by the project, checkpoint committed in
// tests/assets/demo) run through the built-in config from the workspace root, greedy.
TEST(GenerateRecipeDemoTest, ReadmeMainCommandWritesTheSum) {
  const std::string marker = "tests/assets/demo/config.json";
  const std::string config_json = RunfilePath(marker);
  ASSERT_FALSE(ReadFile(config_json).empty()) << config_json;
  const std::string root = config_json.substr(0, config_json.size() - marker.size());
  for (const auto& [prompt, sum] : std::vector<std::pair<std::string, std::string>>{
           {"12+35=", "47"}, {"47+58=", "105"}, {"99+1=", "100"}}) {
    ProcessResult r = RunProcess(
        {RunfilePath("recipes/generate"), "--config", "demo/generation", "prompt.user=" + prompt},
        root);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, prompt + sum + "\n");
    ExpectMetricLines(r.err);
    EXPECT_THAT(r.err, HasSubstr("layout grouped"));
  }
}

// The same demo checkpoint through torchtune's component builders (every size a key) and
// through its own config.json: the same model, the same sum.
TEST(GenerateRecipeDemoTest, ComponentBuildersAndConfigJsonBuildTheDemoModel) {
  const std::string marker = "tests/assets/demo/config.json";
  const std::string config_json = RunfilePath(marker);
  const std::string root = config_json.substr(0, config_json.size() - marker.size());
  const std::string sizes =
      "vocab_size: 264, num_layers: 4, num_heads: 8, num_kv_heads: 2, embed_dim: 128, "
      "max_seq_len: 64, intermediate_dim: 384";
  // Overrides merge into the demo's model node: the config.json case deletes its sizes.
  const std::vector<std::vector<std::string>> models = {
      {"model={_component_: torchtune.models.llama3.llama3, rope_base: 10000.0, " + sizes + "}"},
      {"model={_component_: torchtune.models.llama2.llama2, " + sizes + "}"},
      {"model._component_=cctune.models.from_config_json", "~model.vocab_size",
       "~model.num_layers", "~model.num_heads", "~model.num_kv_heads", "~model.embed_dim",
       "~model.intermediate_dim", "~model.max_seq_len"},
  };
  for (const std::vector<std::string>& overrides : models) {
    std::vector<std::string> argv = {RunfilePath("recipes/generate"), "--config",
                                     "demo/generation"};
    argv.insert(argv.end(), overrides.begin(), overrides.end());
    ProcessResult r = RunProcess(argv, root);
    ASSERT_EQ(r.exit_code, 0) << overrides[0] << "\n" << r.err;
    EXPECT_EQ(r.out, "12+35=47\n") << overrides[0];
  }
}

// Hostile values: every one is an error on stderr with exit code 1 naming the key, never a
// crash, a hang or text from a model that does not match its checkpoint.
TEST(GenerateRecipeDemoTest, HostileValuesAreErrorsNamingTheKey) {
  const std::string marker = "tests/assets/demo/config.json";
  const std::string config_json = RunfilePath(marker);
  const std::string root = config_json.substr(0, config_json.size() - marker.size());
  const std::string fixture = testing::TestTempDir("generate_hostile");
  ASSERT_TRUE(testing::WriteLlama2cFixture(fixture).ok());
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      // An addition past INT64_MAX used to slip under the max_seq_len check (then abort).
      {{"max_new_tokens=9223372036854775807"}, "key 'max_new_tokens': must be in [1, 1048576]"},
      {{"temperature=.nan"}, "key 'temperature': must be >= 0"},
      {{"top_k=99999999999"}, "key 'top_k': must be in [1, 2147483647]"},
      // The prompt used to be cut to max_seq_len without a word.
      {{"tokenizer.max_seq_len=3"}, "more than tokenizer.max_seq_len (3)"},
      // Same weight shapes, other head counts: used to print wrong text with exit 0.
      {{"model.num_heads=4", "model.num_kv_heads=1"},
       "num_heads (num_attention_heads): 8 in the checkpoint, 4 in the model"},
      {{"model.num_heads=16", "model.num_kv_heads=4"}, "tests/assets/demo/config.json"},
      // Used to segfault (RoPE table size overflow) and to build layers for minutes.
      {{"model.max_seq_len=9223372036854775807"}, "key 'model.max_seq_len': must be in [1, "},
      {{"model.num_layers=1000000000"}, "key 'model.num_layers': must be in [1, 4096]"},
      // A tokenizer with more ids than the model's embedding: stop tokens past the vocabulary
      // were dropped, so generation could never stop.
      {{"tokenizer={_component_: cctune.models.llama2c.llama2c_tokenizer, path: " + fixture +
        "/tok.bin}"},
       "the tokenizer has 300 tokens but the model's vocab_size is 264"},
      // Used to recurse until the stack ran out.
      {{"x=[&a [*a]]"}, "refers to a value that contains it"},
  };
  for (const auto& [overrides, expected] : cases) {
    std::vector<std::string> argv = {RunfilePath("recipes/generate"), "--config",
                                     "demo/generation"};
    argv.insert(argv.end(), overrides.begin(), overrides.end());
    ProcessResult r = RunProcess(argv, root);
    const std::string what = ::testing::PrintToString(overrides);
    EXPECT_EQ(r.exit_code, 1) << what << "\n" << r.err;
    EXPECT_EQ(r.out, "") << what;
    EXPECT_THAT(r.err, HasSubstr(expected)) << what;
  }
}

}  // namespace
}  // namespace testing
}  // namespace cctune
