#include "data/collate.h"

#include <string>
#include <vector>

#include "core/random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cctune {
namespace {

using ::testing::HasSubstr;

constexpr int32_t X = kIgnoreIndex;

Sample RandomSample(Generator& gen, int len) {
  Sample s;
  for (int i = 0; i < len; ++i) {
    s.tokens.push_back(static_cast<int32_t>(gen.UniformInt(1000)));
    s.labels.push_back(gen.UniformInt(3) == 0 ? X : s.tokens.back());
  }
  return s;
}

std::vector<int64_t> Row(const Tensor& t, int64_t r) {
  std::vector<int64_t> all = *t.ToInt64Vector();
  const int64_t s = t.size(1);
  return std::vector<int64_t>(all.begin() + r * s, all.begin() + (r + 1) * s);
}

TEST(CollateTest, RightPadsToTheLongestSample) {
  Generator gen(1);
  for (int64_t multiple : {1, 8}) {
    std::vector<Sample> samples = {RandomSample(gen, 5), RandomSample(gen, 11),
                                   RandomSample(gen, 1)};
    std::vector<const Sample*> ptrs = {&samples[0], &samples[1], &samples[2]};
    CollateOptions o;
    o.pad_id = 999;
    o.pad_to_multiple_of = multiple;
    auto batch = Collate(ptrs, o);
    ASSERT_TRUE(batch.ok()) << batch.status();
    const int64_t s = multiple == 1 ? 11 : 16;
    EXPECT_EQ(batch->tokens.shape(), (Shape{3, s}));
    EXPECT_EQ(batch->tokens.dtype(), DType::kI64);
    EXPECT_FALSE(batch->packed);
    EXPECT_FALSE(batch->input_pos.defined());
    int64_t label_tokens = 0;
    for (int r = 0; r < 3; ++r) {
      const std::vector<int64_t> tok = Row(batch->tokens, r), lab = Row(batch->labels, r);
      for (int64_t i = 0; i < s; ++i) {
        const bool real = i < static_cast<int64_t>(samples[r].tokens.size());
        EXPECT_EQ(tok[i], real ? samples[r].tokens[i] : 999);
        EXPECT_EQ(lab[i], real ? samples[r].labels[i] : X);
        label_tokens += real && samples[r].labels[i] != X;
      }
    }
    EXPECT_EQ(batch->num_tokens, 17);
    EXPECT_EQ(batch->num_label_tokens, label_tokens);
  }
}

TEST(CollateTest, OtherIgnoreIndexIsApplied) {
  Sample s;
  s.tokens = {5, 6};
  s.labels = {X, 6};
  const Sample* p = &s;
  CollateOptions o;
  o.ignore_index = -1;
  auto batch = Collate({p}, o);
  ASSERT_TRUE(batch.ok());
  EXPECT_EQ(Row(batch->labels, 0), (std::vector<int64_t>{-1, 6}));
}

TEST(CollateTest, PackedSamplesStackWithPositionsAndMask) {
  Sample a, b;
  a.tokens = {1, 2, 3, 4, 5};
  a.labels = {X, 2, 3, X, 5};
  a.input_pos = {0, 1, 2, 0, 1};
  a.seq_lens = {3, 2};
  b.tokens = {6, 7, 8, 0, 0};
  b.labels = {X, 7, 8, X, X};
  b.input_pos = {0, 1, 2, 3, 4};
  b.seq_lens = {3, 2};
  b.num_padding = 2;
  auto batch = Collate({&a, &b}, CollateOptions());
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_TRUE(batch->packed);
  EXPECT_EQ(Row(batch->input_pos, 1), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(batch->num_tokens, 8);
  EXPECT_EQ(batch->num_label_tokens, 5);
  auto mask = BlockCausalMask(*batch);
  ASSERT_TRUE(mask.ok());
  EXPECT_EQ(mask->shape(), (Shape{2, 5, 5}));
  // Reference: same document (by cumulative lengths) and not in the future.
  const bool* m = mask->data<bool>();
  for (int r = 0; r < 2; ++r) {
    const std::vector<int32_t>& lens = batch->seq_lens[r];
    std::vector<int> doc;
    for (size_t d = 0; d < lens.size(); ++d) doc.insert(doc.end(), lens[d], static_cast<int>(d));
    for (int i = 0; i < 5; ++i) {
      for (int j = 0; j < 5; ++j) {
        EXPECT_EQ(m[(r * 5 + i) * 5 + j], doc[i] == doc[j] && j <= i) << r << i << j;
      }
    }
  }
  // Mixed packed and unpacked, or packs of different lengths, are errors.
  Sample plain;
  plain.tokens = {1};
  plain.labels = {1};
  EXPECT_THAT(std::string(Collate({&a, &plain}, CollateOptions()).status().message()),
              HasSubstr("sample 1 is not packed"));
  Sample shorter = a;
  shorter.tokens.pop_back();
  shorter.labels.pop_back();
  shorter.input_pos.pop_back();
  shorter.seq_lens = {3, 1};
  EXPECT_THAT(std::string(Collate({&a, &shorter}, CollateOptions()).status().message()),
              HasSubstr("packed sample 1 has 4 tokens, sample 0 has 5"));
}

TEST(CollateTest, UnpackedMaskIsCausal) {
  Generator gen(2);
  Sample s = RandomSample(gen, 4);
  auto batch = Collate({&s}, CollateOptions());
  auto mask = BlockCausalMask(*batch);
  ASSERT_TRUE(mask.ok());
  const bool* m = mask->data<bool>();
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 4; ++j) EXPECT_EQ(m[i * 4 + j], j <= i);
  }
}

TEST(CollateTest, ShiftLabelsMovesLeftAndIgnoresTheLast) {
  Tensor labels = *Tensor::FromVector(std::vector<int64_t>{1, 2, 3, 4, 5, 6}, {2, 3});
  auto shifted = ShiftLabels(labels);
  ASSERT_TRUE(shifted.ok());
  EXPECT_EQ(*shifted->ToInt64Vector(), (std::vector<int64_t>{2, 3, X, 5, 6, X}));
  // A transposed view works too.
  Tensor t = *labels.Transpose(0, 1);  // [3, 2]: rows {1,4}, {2,5}, {3,6}
  EXPECT_EQ(*ShiftLabels(t)->ToInt64Vector(), (std::vector<int64_t>{4, X, 5, X, 6, X}));
  EXPECT_FALSE(ShiftLabels(*Tensor::Zeros({3}, DType::kI64)).ok());
}

TEST(CollateTest, ErrorsNameTheProblem) {
  EXPECT_THAT(std::string(Collate({}, CollateOptions()).status().message()),
              HasSubstr("empty batch"));
  Sample bad;
  bad.tokens = {1, 2};
  bad.labels = {1};
  EXPECT_THAT(std::string(Collate({&bad}, CollateOptions()).status().message()),
              HasSubstr("sample 0 has 2 tokens but 1 labels"));
}

}  // namespace
}  // namespace cctune
