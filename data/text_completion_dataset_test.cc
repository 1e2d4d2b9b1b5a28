#include "data/text_completion_dataset.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tokenizers/byte_tokenizer.h"

namespace cctune {
namespace {

using ::testing::HasSubstr;

std::vector<int32_t> WithBosEos(const std::string& s, bool eos = true) {
  std::vector<int32_t> ids = {ByteTokenizer::kBos};
  for (unsigned char c : s) ids.push_back(c);
  if (eos) ids.push_back(ByteTokenizer::kEos);
  return ids;
}

TEST(TextCompletionDatasetTest, EncodesTextWithBosEosAndTrainsOnAll) {
  ByteTokenizer tok;
  TextCompletionDatasetOptions o;
  o.source = "data/testdata/text.jsonl";
  auto ds = LoadTextCompletionDataset(tok, o);
  ASSERT_TRUE(ds.ok()) << ds.status();
  ASSERT_EQ(ds->size(), 3);
  EXPECT_EQ((*ds)[1].tokens, WithBosEos("It learned to add."));
  for (const Sample& s : ds->samples()) EXPECT_EQ(s.labels, s.tokens);
  EXPECT_EQ(ds->NumTokens(), 42 + 20 + 5);

  o.add_eos = false;
  o.max_seq_len = 10;
  ds = LoadTextCompletionDataset(tok, o);
  ASSERT_TRUE(ds.ok()) << ds.status();
  // Cut without turning the last token into EOS.
  std::vector<int32_t> want = WithBosEos("Once upon a time", false);
  want.resize(10);
  EXPECT_EQ((*ds)[0].tokens, want);
  EXPECT_EQ((*ds)[2].tokens, WithBosEos("abc", false));
}

TEST(TextCompletionDatasetTest, ErrorsNameFileLineAndColumn) {
  ByteTokenizer tok;
  TextCompletionDatasetOptions o;
  o.source = "data/testdata/text.jsonl";
  o.column = "body";
  EXPECT_EQ(std::string(LoadTextCompletionDataset(tok, o).status().message()),
            "data/testdata/text.jsonl:1: no column 'body'; the record has columns text");
  o.column = "meta";  // present in record 3 only, and a number there
  EXPECT_THAT(std::string(LoadTextCompletionDataset(tok, o).status().message()),
              HasSubstr("text.jsonl:1: no column 'meta'"));
  o.column = "text";
  o.max_seq_len = -1;
  EXPECT_THAT(std::string(LoadTextCompletionDataset(tok, o).status().message()),
              HasSubstr("max_seq_len (-1)"));
}

}  // namespace
}  // namespace cctune
