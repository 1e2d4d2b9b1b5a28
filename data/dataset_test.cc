#include "data/dataset.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tokenizers/byte_tokenizer.h"

namespace cctune {
namespace {

using ::testing::HasSubstr;

Dataset Numbered(int n) {
  std::vector<Sample> samples(n);
  for (int i = 0; i < n; ++i) samples[i].tokens = samples[i].labels = {i};
  return Dataset(std::move(samples), false, "nums");
}

std::vector<int32_t> Firsts(const Dataset& ds) {
  std::vector<int32_t> out;
  for (const Sample& s : ds.samples()) out.push_back(s.tokens[0]);
  return out;
}

TEST(SelectSplitTest, HuggingFaceSlices) {
  const Dataset ds = Numbered(10);
  EXPECT_EQ(SelectSplit(ds, "train")->size(), 10);
  EXPECT_EQ(Firsts(*SelectSplit(ds, "train[:90%]")),
            (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(Firsts(*SelectSplit(ds, "train[90%:]")), (std::vector<int32_t>{9}));
  EXPECT_EQ(Firsts(*SelectSplit(ds, "train[2:4]")), (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(Firsts(*SelectSplit(ds, "train[-3:]")), (std::vector<int32_t>{7, 8, 9}));
  EXPECT_EQ(SelectSplit(ds, "train[5:100]")->size(), 5);  // clamped, as slicing does
  EXPECT_EQ(SelectSplit(ds, "train[2:4]")->source(), "nums[2:4]");
  EXPECT_THAT(std::string(SelectSplit(ds, "test").status().message()), HasSubstr("'train'"));
  EXPECT_THAT(std::string(SelectSplit(ds, "train[x:]").status().message()), HasSubstr("'x'"));
  EXPECT_FALSE(SelectSplit(ds, "train[5]").ok());
  EXPECT_FALSE(SelectSplit(ds, "train[:150%]").ok());
}

TEST(SelectSplitTest, OtherSplitNamesSliceAlike) {
  const Dataset ds = Numbered(10);
  EXPECT_EQ(*SplitName("validation[:10%]"), "validation");
  EXPECT_EQ(*SplitName("train"), "train");
  EXPECT_THAT(std::string(SplitName("train+test").status().message()), HasSubstr("'+'"));
  EXPECT_FALSE(SplitName("[:5]").ok());
  EXPECT_EQ(Firsts(*SliceSplit(ds, "validation[-20%:]")), (std::vector<int32_t>{8, 9}));
  EXPECT_EQ(SliceSplit(ds, "test")->size(), 10);
  EXPECT_THAT(std::string(SliceSplit(ds, "test[3]").status().message()),
              HasSubstr("expected test[start:end]"));
}

TEST(SampleFromMessagesTest, MaskBecomesIgnoredLabels) {
  ByteTokenizer tok;
  std::vector<Message> m(2);
  m[0].role = Role::kUser;
  m[0].content = "ab";
  m[0].masked = true;
  m[1].role = Role::kAssistant;
  m[1].content = "c";
  auto s = SampleFromMessages(tok, PromptFormat::kNone, m, 0);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->tokens, (std::vector<int32_t>{256, 'a', 'b', 'c', 257}));
  EXPECT_EQ(s->labels, (std::vector<int32_t>{kIgnoreIndex, kIgnoreIndex, kIgnoreIndex, 'c', 257}));
  const Dataset ds({*s, *s}, false, "x");
  EXPECT_EQ(ds.NumTokens(), 10);
  EXPECT_EQ(ds.NumLabelTokens(), 4);
  EXPECT_FALSE(SampleFromMessages(tok, PromptFormat::kNone, m, -1).ok());
}

}  // namespace
}  // namespace cctune
