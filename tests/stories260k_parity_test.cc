// stories260K against llama2.c's run.c (../shared/models/stories260K/reference): the model
// loaded through the llama2.c checkpoint reader, the prompt encoded and the output decoded by
// the llama2.c tokenizer, and greedy generation through Generate().
//
// run.c -n N makes N forward passes, one per position from BOS on; the prompt fills the first
// positions, so it samples N + 1 - (prompt tokens including BOS) new tokens, stopping early if
// it samples BOS. It prints the decoded prompt (after BOS) and the new tokens, then "\n".
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/random.h"
#include "generation/generate.h"
#include "generation/model_loader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/util/shared_dir.h"
#include "tokenizers/llama2c.h"

namespace cctune {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

class Stories260KBase : public ::testing::Test {
 protected:
  void SetUp() override {
    auto bin = testing::SharedFile("models/stories260K/stories260K.bin");
    if (!bin.ok()) GTEST_SKIP() << bin.status();
    auto tok = testing::SharedFile("models/stories260K/tok512.bin");
    if (!tok.ok()) GTEST_SKIP() << tok.status();
    dir_ = *testing::SharedDir() + "/models/stories260K/reference/";
    model_ = ValueOrDie(LoadLlama2cModel(*bin));
    tokenizer_ = ValueOrDie(Llama2cTokenizer::Load(*tok, 512));
  }

  // run.c's `-t 0 -n steps -i prompt`: returns (all tokens, decoded text + "\n").
  std::pair<std::vector<int32_t>, std::string> RunC(const std::string& prompt, int64_t steps,
                                                    bool cache, KvCacheLayout layout) {
    std::vector<int32_t> ids = tokenizer_->Encode(prompt, /*add_bos=*/true, /*add_eos=*/false);
    model_.model->DeleteCaches();
    if (cache) CCTUNE_CHECK_OK(model_.model->SetupCaches(1, DType::kF32, -1, layout));
    GenerateOptions opts;
    opts.max_new_tokens = steps + 1 - static_cast<int64_t>(ids.size());
    opts.sampling.temperature = 0.f;
    opts.stop_tokens = {tokenizer_->bos_id()};  // run.c stops when it samples BOS
    opts.pad_id = -1;                           // no padding: every prompt id is real
    Generator gen(0);
    GenerateResult out =
        ValueOrDie(Generate(*model_.model, ValueOrDie(LeftPad({ids}, -1)), opts, gen));
    std::vector<int32_t> all = ids;
    for (int32_t id : out.generated[0]) {
      if (id == tokenizer_->bos_id()) break;  // run.c does not print the BOS it stops on
      all.push_back(id);
    }
    return {all, ValueOrDie(tokenizer_->Decode(all)) + "\n"};
  }

  std::string dir_;
  LoadedModel model_;
  std::unique_ptr<Llama2cTokenizer> tokenizer_;
};

class Stories260KTest : public Stories260KBase,
                        public ::testing::WithParamInterface<KvCacheLayout> {};

TEST_P(Stories260KTest, GreedyFromBosMatchesRunC200Steps) {
  nlohmann::json ref = nlohmann::json::parse(ReadFile(dir_ + "greedy_steps200_token_ids.json"));
  std::vector<int32_t> want = ref.at("token_ids_after_bos").get<std::vector<int32_t>>();
  ASSERT_EQ(want.size(), 200u);
  auto [ids, text] = RunC("", 200, /*cache=*/true, GetParam());
  ASSERT_EQ(ids.size(), 201u);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(std::vector<int32_t>(ids.begin() + 1, ids.end()), want);
  EXPECT_EQ(text, ReadFile(dir_ + "greedy_steps200.txt"));
}

TEST_P(Stories260KTest, ZooPromptMatchesRunC60Steps) {
  auto [ids, text] = RunC("Zoo", 60, /*cache=*/true, GetParam());
  EXPECT_EQ(ids.size(), 61u);
  EXPECT_EQ(text, ReadFile(dir_ + "greedy_zoo_steps60.txt"));
}

INSTANTIATE_TEST_SUITE_P(Layouts, Stories260KTest,
                         ::testing::Values(KvCacheLayout::kGrouped, KvCacheLayout::kExpanded),
                         [](const auto& info) {
                           return std::string(KvCacheLayoutName(info.param));
                         });

// Full recomputation without a cache gives the same text.
TEST_F(Stories260KBase, WithoutCacheMatchesRunC) {
  auto [ids, text] = RunC("Zoo", 60, /*cache=*/false, KvCacheLayout::kGrouped);
  EXPECT_EQ(text, ReadFile(dir_ + "greedy_zoo_steps60.txt"));
}

}  // namespace
}  // namespace cctune
