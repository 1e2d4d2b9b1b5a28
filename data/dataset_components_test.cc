#include "data/dataset_components.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "config/config.h"
#include "data/byte_tokenizer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

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

}  // namespace
}  // namespace cctune
