#include "data/packed_dataset.h"

#include <numeric>
#include <string>
#include <vector>

#include "core/random.h"
#include "data/collate.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cctune {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int32_t X = kIgnoreIndex;

// Sample k has `len` tokens 100*k + i; labels: the tokens, the first one masked.
Sample Doc(int k, int len) {
  Sample s;
  for (int i = 0; i < len; ++i) {
    s.tokens.push_back(100 * k + i);
    s.labels.push_back(i == 0 ? X : 100 * k + i);
  }
  return s;
}

Dataset Docs(const std::vector<int>& lens) {
  std::vector<Sample> samples;
  for (size_t k = 0; k < lens.size(); ++k) samples.push_back(Doc(static_cast<int>(k) + 1, lens[k]));
  return Dataset(std::move(samples), false, "docs");
}

// torchtune's PackedDataset docstring example: max_seq_len 6, samples of 3, 2, 2 and 2 tokens.
TEST(PackDatasetTest, TorchtuneDocstringExample) {
  PackOptions o;
  o.max_seq_len = 6;
  o.pad_id = 7;
  auto packed = PackDataset(Docs({3, 2, 2, 2}), o);
  ASSERT_TRUE(packed.ok()) << packed.status();
  ASSERT_TRUE(packed->packed());
  ASSERT_EQ(packed->size(), 2);
  const Sample& a = (*packed)[0];
  EXPECT_THAT(a.tokens, ElementsAre(100, 101, 102, 200, 201, 7));
  EXPECT_THAT(a.labels, ElementsAre(X, 101, 102, X, 201, X));
  EXPECT_THAT(a.input_pos, ElementsAre(0, 1, 2, 0, 1, 2));
  EXPECT_THAT(a.seq_lens, ElementsAre(3, 2, 1));
  EXPECT_EQ(a.num_padding, 1);
  const Sample& b = (*packed)[1];
  EXPECT_THAT(b.tokens, ElementsAre(300, 301, 400, 401, 7, 7));
  EXPECT_THAT(b.input_pos, ElementsAre(0, 1, 0, 1, 2, 3));
  EXPECT_THAT(b.seq_lens, ElementsAre(2, 2, 2));

  // The docstring's mask for the first pack.
  Batch batch = *Collate({&a}, CollateOptions());
  Tensor mask = *BlockCausalMask(batch);
  const bool* m = mask.data<bool>();
  const int want[6][6] = {{1, 0, 0, 0, 0, 0}, {1, 1, 0, 0, 0, 0}, {1, 1, 1, 0, 0, 0},
                          {0, 0, 0, 1, 0, 0}, {0, 0, 0, 1, 1, 0}, {0, 0, 0, 0, 0, 1}};
  for (int i = 0; i < 6; ++i) {
    for (int j = 0; j < 6; ++j) EXPECT_EQ(m[i * 6 + j], want[i][j] == 1) << i << "," << j;
  }
}

// split_across_pack, worked by hand from torchtune's algorithm: max_seq_len 6, samples of 4,
// 5 and 2 tokens. The 5-token sample is cut after 2 tokens; its rest keeps its positions.
TEST(PackDatasetTest, SplitAcrossPackWorkedExample) {
  PackOptions o;
  o.max_seq_len = 6;
  o.split_across_pack = true;
  auto packed = PackDataset(Docs({4, 5, 2}), o);
  ASSERT_TRUE(packed.ok()) << packed.status();
  ASSERT_EQ(packed->size(), 2);
  const Sample& a = (*packed)[0];
  EXPECT_THAT(a.tokens, ElementsAre(100, 101, 102, 103, 200, 201));
  EXPECT_THAT(a.input_pos, ElementsAre(0, 1, 2, 3, 0, 1));
  EXPECT_THAT(a.seq_lens, ElementsAre(4, 2));
  EXPECT_EQ(a.num_padding, 0);
  const Sample& b = (*packed)[1];
  EXPECT_THAT(b.tokens, ElementsAre(202, 203, 204, 300, 301, 0));
  EXPECT_THAT(b.labels, ElementsAre(202, 203, 204, X, 301, X));
  EXPECT_THAT(b.input_pos, ElementsAre(2, 3, 4, 0, 1, 2));
  EXPECT_THAT(b.seq_lens, ElementsAre(3, 2, 1));

  // A sample longer than two packs is cut twice; positions wrap modulo max_seq_len.
  packed = PackDataset(Docs({14}), o);
  ASSERT_TRUE(packed.ok());
  ASSERT_EQ(packed->size(), 3);
  EXPECT_THAT((*packed)[1].input_pos, ElementsAre(0, 1, 2, 3, 4, 5));
  EXPECT_THAT((*packed)[2].input_pos, ElementsAre(0, 1, 2, 3, 4, 5));
  EXPECT_THAT((*packed)[2].seq_lens, ElementsAre(2, 4));
}

TEST(PackDatasetTest, RandomSamplesStayWholeInOrderAndGreedy) {
  Generator gen(12);
  for (int64_t max : {8, 31, 64}) {
    std::vector<int> lens;
    for (int k = 0; k < 60; ++k) lens.push_back(1 + static_cast<int>(gen.UniformInt(max)));
    const Dataset ds = Docs(lens);
    PackOptions o;
    o.max_seq_len = max;
    o.pad_id = -1;
    auto packed = PackDataset(ds, o);
    ASSERT_TRUE(packed.ok()) << packed.status();
    size_t next_doc = 0;
    for (int64_t p = 0; p < packed->size(); ++p) {
      const Sample& s = (*packed)[p];
      ASSERT_EQ(s.tokens.size(), static_cast<size_t>(max));
      ASSERT_EQ(std::accumulate(s.seq_lens.begin(), s.seq_lens.end(), 0), max);
      // Each document of the pack is the next sample, whole; positions restart at 0.
      size_t at = 0;
      const size_t docs = s.seq_lens.size() - (s.num_padding > 0 ? 1 : 0);
      for (size_t d = 0; d < docs; ++d, ++next_doc) {
        const Sample& want = ds[next_doc];
        ASSERT_EQ(s.seq_lens[d], static_cast<int>(want.tokens.size()));
        for (size_t i = 0; i < want.tokens.size(); ++i) {
          ASSERT_EQ(s.tokens[at + i], want.tokens[i]);
          ASSERT_EQ(s.labels[at + i], want.labels[i]);
          ASSERT_EQ(s.input_pos[at + i], static_cast<int>(i));
        }
        at += want.tokens.size();
      }
      for (; at < s.tokens.size(); ++at) {
        ASSERT_EQ(s.tokens[at], -1);
        ASSERT_EQ(s.labels[at], X);
      }
      // Greedy: the next sample did not fit in this pack's free space.
      if (next_doc < lens.size()) {
        ASSERT_GT(lens[next_doc], s.num_padding);
      }
    }
    EXPECT_EQ(next_doc, lens.size());
    EXPECT_EQ(packed->NumTokens(), ds.NumTokens());
    EXPECT_EQ(packed->NumLabelTokens(), ds.NumLabelTokens());
  }
}

TEST(PackDatasetTest, SplitRandomKeepsTheTokenStream) {
  Generator gen(3);
  std::vector<int> lens;
  for (int k = 0; k < 40; ++k) lens.push_back(1 + static_cast<int>(gen.UniformInt(50)));
  const Dataset ds = Docs(lens);
  PackOptions o;
  o.max_seq_len = 16;
  o.split_across_pack = true;
  auto packed = PackDataset(ds, o);
  ASSERT_TRUE(packed.ok());
  std::vector<int32_t> stream, packed_stream;
  for (const Sample& s : ds.samples())
    stream.insert(stream.end(), s.tokens.begin(), s.tokens.end());
  for (int64_t p = 0; p < packed->size(); ++p) {
    const Sample& s = (*packed)[p];
    if (p + 1 < packed->size()) {
      EXPECT_EQ(s.num_padding, 0);
    }
    packed_stream.insert(packed_stream.end(), s.tokens.begin(), s.tokens.end() - s.num_padding);
  }
  EXPECT_EQ(packed_stream, stream);
}

TEST(PackDatasetTest, MaxPacksAndErrors) {
  PackOptions o;
  o.max_seq_len = 6;
  o.max_packs = 1;
  auto packed = PackDataset(Docs({3, 2, 2, 2}), o);
  ASSERT_TRUE(packed.ok());
  EXPECT_EQ(packed->size(), 1);
  o.max_packs = 0;
  auto too_long = PackDataset(Docs({3, 7}), o);
  ASSERT_FALSE(too_long.ok());
  EXPECT_THAT(std::string(too_long.status().message()),
              HasSubstr("sample 1 has 7 tokens, more than max_seq_len (6)"));
  o.max_seq_len = 0;
  EXPECT_FALSE(PackDataset(Docs({1}), o).ok());
  o.max_seq_len = 6;
  EXPECT_THAT(std::string(PackDataset(*PackDataset(Docs({1}), o), o).status().message()),
              HasSubstr("already packed"));
  // Empty samples are skipped.
  packed = PackDataset(Docs({0, 2, 0}), o);
  ASSERT_TRUE(packed.ok());
  ASSERT_EQ(packed->size(), 1);
  EXPECT_THAT((*packed)[0].seq_lens, ElementsAre(2, 4));
}

}  // namespace
}  // namespace cctune
