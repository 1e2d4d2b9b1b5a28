#include "data/dataset_components.h"

#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "config/config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tokenizers/byte_tokenizer.h"

namespace cctune {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<std::shared_ptr<const Dataset>> Make(const std::string& body,
                                                    int64_t max_seq_len = 0) {
  CCTUNE_CHECK_OK(RegisterDatasets());
  absl::StatusOr<Config> cfg = Config::FromString("dataset:\n" + body, "ds.yaml");
  CCTUNE_CHECK_OK(cfg);
  static const ByteTokenizer* tok = new ByteTokenizer();
  DatasetContext ctx;
  ctx.tokenizer = tok;
  ctx.max_seq_len = max_seq_len;
  return DatasetRegistry().InstantiateKey(cfg->root(), "dataset", ctx);
}

TEST(DatasetComponentsTest, TorchtuneAlpacaWithLocalJson) {
  auto ds = Make(
      "  _component_: torchtune.datasets.alpaca_dataset\n"
      "  source: json\n"
      "  data_files: data/testdata/alpaca_renamed.json\n"
      "  column_map: {instruction: prompt, input: context, output: response}\n"
      "  split: train[:2]\n");
  ASSERT_TRUE(ds.ok()) << ds.status();
  EXPECT_EQ((*ds)->size(), 2);
  EXPECT_FALSE((*ds)->packed());
}

TEST(DatasetComponentsTest, PackedChatAndTextCompletion) {
  auto chat = Make(
      "  _component_: torchtune.datasets.chat_dataset\n"
      "  source: data/testdata/chat_openai.jsonl\n"
      "  conversation_style: openai\n"
      "  packed: true\n",
      128);
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_TRUE((*chat)->packed());
  ASSERT_GE((*chat)->size(), 1);
  EXPECT_EQ((**chat)[0].tokens.size(), 128u);
  EXPECT_EQ((**chat)[0].tokens.back(), ByteTokenizer::kPad);

  auto text = Make(
      "  _component_: torchtune.datasets.text_completion_dataset\n"
      "  source: data/testdata/text.jsonl\n"
      "  packed: true\n",
      16);
  ASSERT_TRUE(text.ok()) << text.status();
  // Samples are first cut to max_seq_len (42 -> 16, 20 -> 16, 5), then the 37 tokens are
  // split across packs of 16: 3 packs, the last one padded.
  EXPECT_EQ((*text)->size(), 3);
  EXPECT_EQ((*text)->NumTokens(), 37);
  EXPECT_EQ((**text)[2].num_padding, 11);

  auto instruct = Make(
      "  _component_: cctune.datasets.instruct_dataset\n"
      "  source: data/testdata/missing_column.jsonl\n"
      "  column_map: {input: instruction}\n");
  ASSERT_FALSE(instruct.ok());
  EXPECT_THAT(std::string(instruct.status().message()),
              HasSubstr("missing_column.jsonl:2: no column 'output'"));
}

TEST(DatasetComponentsTest, ConfigErrors) {
  auto no_len = Make(
      "  _component_: torchtune.datasets.text_completion_dataset\n"
      "  source: data/testdata/text.jsonl\n"
      "  packed: true\n");
  EXPECT_THAT(std::string(no_len.status().message()), HasSubstr("max_seq_len"));
  auto no_files = Make("  _component_: torchtune.datasets.alpaca_dataset\n  source: json\n");
  EXPECT_THAT(std::string(no_files.status().message()), HasSubstr("data_files"));
  auto no_style = Make(
      "  _component_: torchtune.datasets.chat_dataset\n  source: "
      "data/testdata/chat_openai.jsonl\n");
  EXPECT_THAT(std::string(no_style.status().message()), HasSubstr("conversation_style"));
  auto bad_key = Make(
      "  _component_: torchtune.datasets.alpaca_dataset\n  source: data/testdata/alpaca.jsonl\n"
      "  shuffle: true\n");
  EXPECT_THAT(std::string(bad_key.status().message()), HasSubstr("shuffle"));
}

TEST(SyntheticArithmeticTest, TextIsCorrectDeterministicAndSeeded) {
  std::set<std::string> seen;
  for (int64_t i = 0; i < 200; ++i) {
    auto [prompt, answer] = SyntheticArithmeticText(7, i, 2);
    auto again = SyntheticArithmeticText(7, i, 2);
    EXPECT_EQ(prompt, again.first);
    EXPECT_EQ(answer, again.second);
    // Independent check: parse "a+b=" and add.
    const size_t plus = prompt.find('+');
    ASSERT_NE(plus, std::string::npos) << prompt;
    ASSERT_EQ(prompt.back(), '=') << prompt;
    const long a = std::stol(prompt.substr(0, plus));
    const long b = std::stol(prompt.substr(plus + 1, prompt.size() - plus - 2));
    EXPECT_GE(a, 0);
    EXPECT_LT(a, 100);
    EXPECT_LT(b, 100);
    EXPECT_EQ(std::stol(answer), a + b) << prompt;
    seen.insert(prompt);
  }
  EXPECT_GT(seen.size(), 150u);  // not a constant stream
  int differ = 0;
  for (int64_t i = 0; i < 20; ++i) {
    differ += SyntheticArithmeticText(7, i, 2).first != SyntheticArithmeticText(8, i, 2).first;
  }
  EXPECT_GT(differ, 10);
}

TEST(SyntheticArithmeticTest, DatasetMasksThePrompt) {
  ASSERT_TRUE(RegisterDatasets().ok());
  auto config = Config::FromString(
      "dataset:\n  _component_: cctune.data.synthetic_arithmetic\n  num_samples: 5\n"
      "  seed: 3\n");
  ASSERT_TRUE(config.ok()) << config.status();
  ByteTokenizer tok;
  DatasetContext ctx;
  ctx.tokenizer = &tok;
  auto ds = DatasetRegistry().InstantiateKey(config->root(), "dataset", ctx);
  ASSERT_TRUE(ds.ok()) << ds.status();
  ASSERT_EQ((*ds)->size(), 5);
  for (int64_t i = 0; i < 5; ++i) {
    auto [prompt, answer] = SyntheticArithmeticText(3, i, 2);
    const Sample& s = (**ds)[i];
    ASSERT_EQ(s.tokens.size(), 1 + prompt.size() + answer.size() + 1);
    EXPECT_EQ(s.tokens.front(), ByteTokenizer::kBos);
    EXPECT_EQ(s.tokens.back(), ByteTokenizer::kEos);
    for (size_t t = 0; t < s.tokens.size(); ++t) {
      if (t < 1 + prompt.size()) {
        EXPECT_EQ(s.labels[t], kIgnoreIndex);
      } else {
        EXPECT_EQ(s.labels[t], s.tokens[t]);
      }
    }
  }
}

// split and packed take effect on the synthetic set too.
TEST(SyntheticArithmeticTest, SplitAndPacking) {
  const std::string head = "  _component_: cctune.data.synthetic_arithmetic\n  num_samples: 10\n";
  auto all = Make(head);
  ASSERT_TRUE(all.ok()) << all.status();
  auto second_half = Make(head + "  split: train[50%:]\n");
  ASSERT_TRUE(second_half.ok()) << second_half.status();
  ASSERT_EQ((*second_half)->size(), 5);
  for (int64_t i = 0; i < 5; ++i) EXPECT_EQ((**second_half)[i].tokens, (**all)[5 + i].tokens);
  EXPECT_FALSE(Make(head + "  split: test\n").ok());

  auto packed = Make(head + "  packed: true\n", /*max_seq_len=*/32);
  ASSERT_TRUE(packed.ok()) << packed.status();
  EXPECT_TRUE((*packed)->packed());
  EXPECT_LT((*packed)->size(), 10);
  size_t tokens = 0;
  for (int64_t i = 0; i < (*all)->size(); ++i) tokens += (**all)[i].tokens.size();
  size_t packed_tokens = 0;
  for (int64_t i = 0; i < (*packed)->size(); ++i) {
    EXPECT_EQ((**packed)[i].tokens.size(), 32u);
    packed_tokens += (**packed)[i].tokens.size();
  }
  EXPECT_GE(packed_tokens, tokens);  // every sample is in a pack, the rest is padding
  auto no_len = Make(head + "  packed: true\n");
  EXPECT_FALSE(no_len.ok());
  EXPECT_THAT(std::string(no_len.status().message()), HasSubstr("max_seq_len"));
}

}  // namespace
}  // namespace cctune
