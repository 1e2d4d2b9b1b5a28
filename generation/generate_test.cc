#include "generation/generate.h"

#include <chrono>
#include <cmath>
#include <limits>
#include <vector>

#include "core/random.h"
#include "generation/test_models.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/ops.h"

namespace cctune {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

Tensor BoolTensor(const std::vector<std::vector<int>>& rows) {
  const int64_t b = rows.size(), s = rows[0].size();
  Tensor t = ValueOrDie(Tensor::Empty({b, s}, DType::kBool));
  for (int64_t r = 0; r < b; ++r) {
    for (int64_t j = 0; j < s; ++j) t.data<bool>()[r * s + j] = rows[r][j] != 0;
  }
  return t;
}

std::vector<int> BoolsOf(const Tensor& t) {
  Tensor c = ValueOrDie(t.Contiguous());
  std::vector<int> out(c.numel());
  for (int64_t i = 0; i < c.numel(); ++i) out[i] = c.data<bool>()[i] ? 1 : 0;
  return out;
}

TEST(ThreeSignificantDigitsTest, RoundsToThreeDigitsInFixedNotation) {
  EXPECT_EQ(ThreeSignificantDigits(11.42), "11.4");
  EXPECT_EQ(ThreeSignificantDigits(1043.2), "1040");
  EXPECT_EQ(ThreeSignificantDigits(7688.0), "7690");
  EXPECT_EQ(ThreeSignificantDigits(0.12345), "0.123");
  EXPECT_EQ(ThreeSignificantDigits(0.0004567), "0.000457");
  EXPECT_EQ(ThreeSignificantDigits(5.0), "5.00");
  EXPECT_EQ(ThreeSignificantDigits(999.6), "1000");
  EXPECT_EQ(ThreeSignificantDigits(9.996), "10.0");
  EXPECT_EQ(ThreeSignificantDigits(0.0), "0");
  EXPECT_EQ(ThreeSignificantDigits(-2.346), "-2.35");
}

// The example in torchtune's get_causal_mask_from_padding_mask docstring.
TEST(CausalMaskFromPaddingMaskTest, MatchesTorchtuneExample) {
  Tensor pad = BoolTensor({{0, 1, 1, 1}});
  Tensor mask = ValueOrDie(CausalMaskFromPaddingMask(pad, 5));
  EXPECT_EQ(mask.shape(), (Shape{1, 4, 5}));
  EXPECT_THAT(BoolsOf(mask), ElementsAreArray({1, 0, 0, 0, 0,  //
                                               0, 1, 0, 0, 0,  //
                                               0, 1, 1, 0, 0,  //
                                               0, 1, 1, 1, 0}));
}

// Against tril(ones) * padding[None, :] with the diagonal set, built step by step.
TEST(CausalMaskFromPaddingMaskTest, RandomMasksMatchDefinition) {
  Generator gen(3);
  for (int64_t b : {1, 3}) {
    for (int64_t s : {1, 5, 9}) {
      for (int64_t extra : {0, 4}) {
        std::vector<std::vector<int>> rows(b, std::vector<int>(s));
        for (auto& row : rows) {
          for (int& x : row) x = gen.Uniform() < 0.6f;
        }
        const int64_t tgt = s + extra;
        Tensor mask = ValueOrDie(CausalMaskFromPaddingMask(BoolTensor(rows), tgt));
        std::vector<int> got = BoolsOf(mask);
        for (int64_t r = 0; r < b; ++r) {
          for (int64_t i = 0; i < s; ++i) {
            for (int64_t j = 0; j < tgt; ++j) {
              int want = j <= i ? 1 : 0;
              if (j < s) want *= rows[r][j];
              if (i == j) want = 1;
              ASSERT_EQ(got[(r * s + i) * tgt + j], want) << b << " " << s << " " << tgt;
            }
          }
        }
      }
    }
  }
}

TEST(CausalMaskFromPaddingMaskTest, Errors) {
  EXPECT_FALSE(CausalMaskFromPaddingMask(BoolTensor({{1, 1, 1}}), 2).ok());
  Tensor wrong = ValueOrDie(Tensor::Zeros({2, 3}, DType::kI64));
  auto st = CausalMaskFromPaddingMask(wrong);
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(std::string(st.status().message()), HasSubstr("bool [b, s]"));
}

// The example in torchtune's get_position_ids_from_padding_mask docstring, plus a second row.
TEST(PositionIdsFromPaddingMaskTest, MatchesTorchtuneExample) {
  Tensor pos = ValueOrDie(
      PositionIdsFromPaddingMask(BoolTensor({{0, 0, 0, 1, 1, 1, 1, 1}, {1, 1, 1, 1, 1, 1, 1, 1}})));
  EXPECT_THAT(ValueOrDie(pos.ToInt64Vector()),
              ElementsAre(0, 0, 0, 0, 1, 2, 3, 4, 0, 1, 2, 3, 4, 5, 6, 7));
}

TEST(LeftPadTest, PadsOnTheLeft) {
  Tensor t = ValueOrDie(LeftPad({{5, 6, 7}, {8}, {9, 10}}, 0));
  EXPECT_EQ(t.shape(), (Shape{3, 3}));
  EXPECT_THAT(ValueOrDie(t.ToInt64Vector()), ElementsAre(5, 6, 7, 0, 0, 8, 0, 9, 10));
  EXPECT_FALSE(LeftPad({}, 0).ok());
  EXPECT_FALSE(LeftPad({{1}, {}}, 0).ok());
}

// ---- Generate ----

// Independent reference: greedy decoding by re-running the whole unpadded sequence through
// the model without caches, masks or positions (its default causal path), with an fp64
// argmax written here. Returns the generated ids and the logits of each step.
struct Reference {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;
};
Reference GreedyReference(TransformerDecoder& model, const std::vector<int32_t>& prompt, int64_t n,
                          const std::vector<int32_t>& stop = {}) {
  Reference ref;
  std::vector<int64_t> seq(prompt.begin(), prompt.end());
  const int64_t v = model.vocab_size();
  for (int64_t t = 0; t < n; ++t) {
    Tensor tokens = ValueOrDie(
        Tensor::FromVector(absl::MakeConstSpan(seq), {1, static_cast<int64_t>(seq.size())}));
    Tensor logits = ValueOrDie(model(tokens));
    std::vector<float> all = ValueOrDie(logits.ToFloatVector());
    std::vector<float> last(all.end() - v, all.end());
    int32_t best = 0;
    for (int32_t i = 1; i < v; ++i) {
      if (static_cast<double>(last[i]) > static_cast<double>(last[best])) best = i;
    }
    ref.tokens.push_back(best);
    ref.logits.push_back(last);
    seq.push_back(best);
    if (std::find(stop.begin(), stop.end(), best) != stop.end()) break;
  }
  return ref;
}

class GenerateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::RandomModelSpec spec;
    loaded_ = ValueOrDie(testing::RandomModel(spec));
  }
  TransformerDecoder& model() { return *loaded_.model; }
  LoadedModel loaded_;
};

TEST_F(GenerateTest, GreedyWithCacheMatchesReference) {
  const std::vector<int32_t> prompt = {3, 17, 42, 5, 88};
  const int64_t n = 12;
  Reference ref = GreedyReference(model(), prompt, n);
  ASSERT_TRUE(model().SetupCaches(1, DType::kF32, 64).ok());
  GenerateOptions opts;
  opts.max_new_tokens = n;
  opts.sampling.temperature = 0.f;
  opts.return_logits = true;
  opts.pad_id = 0;
  Generator gen(1);
  Tensor p = ValueOrDie(LeftPad({prompt}, 0));
  GenerateResult out = ValueOrDie(Generate(model(), p, opts, gen));
  EXPECT_EQ(out.num_generated, n);
  EXPECT_EQ(out.generated[0], ref.tokens);
  EXPECT_EQ(out.tokens.shape(), (Shape{1, 5 + n}));
  std::vector<int64_t> all = ValueOrDie(out.tokens.ToInt64Vector());
  for (size_t j = 0; j < prompt.size(); ++j) EXPECT_EQ(all[j], prompt[j]);
  for (int64_t t = 0; t < n; ++t) EXPECT_EQ(all[5 + t], ref.tokens[t]);
  ASSERT_EQ(out.logits.shape(), (Shape{1, n, model().vocab_size()}));
  std::vector<float> logits = ValueOrDie(out.logits.ToFloatVector());
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t i = 0; i < model().vocab_size(); ++i) {
      ASSERT_NEAR(logits[t * model().vocab_size() + i], ref.logits[t][i], 1e-4) << t << " " << i;
    }
  }
  // One prefill pass then one pass per further token; the attention read 5, 6, ... positions.
  EXPECT_EQ(out.num_forward_passes, n);
  EXPECT_EQ(out.kv_positions_read, n * 5 + n * (n - 1) / 2);
}

// prefill_seconds ends when the first token is known (before its callback) and
// decode_seconds covers every later step: checked against clocks read around the calls.
TEST_F(GenerateTest, PrefillAndDecodeTimesSplitAtTheFirstToken) {
  ASSERT_TRUE(model().SetupCaches(1, DType::kF32, 64).ok());
  GenerateOptions opts;
  opts.max_new_tokens = 6;
  opts.sampling.temperature = 0.f;
  using Clock = std::chrono::steady_clock;
  std::vector<Clock::time_point> at;
  opts.on_token = [&](const GenerationStep&) { at.push_back(Clock::now()); };
  Generator gen(1);
  Tensor p = ValueOrDie(LeftPad({{3, 17, 42}}, 0));
  const Clock::time_point before = Clock::now();
  GenerateResult out = ValueOrDie(Generate(model(), p, opts, gen));
  const Clock::time_point after = Clock::now();
  ASSERT_EQ(at.size(), 6u);
  auto sec = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
  EXPECT_GT(out.prefill_seconds, 0);
  EXPECT_LE(out.prefill_seconds, sec(at[0] - before));
  EXPECT_GE(out.decode_seconds, sec(at[5] - at[0]));
  EXPECT_LE(out.prefill_seconds + out.decode_seconds, sec(after - before));
}

TEST_F(GenerateTest, WithoutCacheMatchesWithCache) {
  const std::vector<int32_t> prompt = {9, 1, 60};
  GenerateOptions opts;
  opts.max_new_tokens = 10;
  opts.sampling.temperature = 0.f;
  opts.return_logits = true;
  Generator gen(1);
  Tensor p = ValueOrDie(LeftPad({prompt}, 0));
  GenerateResult no_cache = ValueOrDie(Generate(model(), p, opts, gen));
  EXPECT_EQ(no_cache.kv_positions_read, 0);
  ASSERT_TRUE(model().SetupCaches(1, DType::kF32).ok());
  GenerateResult cached = ValueOrDie(Generate(model(), p, opts, gen));
  EXPECT_EQ(no_cache.generated, cached.generated);
  std::vector<float> a = ValueOrDie(no_cache.logits.ToFloatVector());
  std::vector<float> b = ValueOrDie(cached.logits.ToFloatVector());
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], b[i], 1e-4) << i;
  // A second call reuses (resets) the caches and gives the same answer.
  GenerateResult again = ValueOrDie(Generate(model(), p, opts, gen));
  EXPECT_EQ(again.generated, cached.generated);
}

// Each row of a left-padded batch generates what it generates alone (padding is invisible).
TEST_F(GenerateTest, LeftPaddedBatchRowsMatchSingleRows) {
  const std::vector<std::vector<int32_t>> prompts = {{4, 8, 15, 16, 23, 42}, {7}, {30, 31, 2}};
  const int64_t n = 9;
  for (bool cache : {false, true}) {
    model().DeleteCaches();
    if (cache) {
      ASSERT_TRUE(model().SetupCaches(3, DType::kF32, 40).ok());
    }
    GenerateOptions opts;
    opts.max_new_tokens = n;
    opts.sampling.temperature = 0.f;
    opts.return_logits = true;
    Generator gen(1);
    GenerateResult out = ValueOrDie(Generate(model(), ValueOrDie(LeftPad(prompts, 0)), opts, gen));
    std::vector<float> logits = ValueOrDie(out.logits.ToFloatVector());
    const int64_t v = model().vocab_size();
    model().DeleteCaches();
    for (size_t r = 0; r < prompts.size(); ++r) {
      Reference ref = GreedyReference(model(), prompts[r], n);
      EXPECT_EQ(out.generated[r], ref.tokens) << "row " << r << " cache " << cache;
      for (int64_t t = 0; t < n; ++t) {
        for (int64_t i = 0; i < v; ++i) {
          ASSERT_NEAR(logits[(r * n + t) * v + i], ref.logits[t][i], 1e-4)
              << "row " << r << " step " << t << " cache " << cache;
        }
      }
    }
  }
}

TEST_F(GenerateTest, SeededSamplingIsReproducible) {
  ASSERT_TRUE(model().SetupCaches(2, DType::kF32, 64).ok());
  GenerateOptions opts;
  opts.max_new_tokens = 20;
  opts.sampling.temperature = 1.0f;
  opts.sampling.top_k = 20;
  opts.sampling.top_p = 0.9f;
  Tensor p = ValueOrDie(LeftPad({{5, 6, 7}, {11, 12}}, 0));
  Generator a(1234), b(1234), c(99);
  GenerateResult ra = ValueOrDie(Generate(model(), p, opts, a));
  GenerateResult rb = ValueOrDie(Generate(model(), p, opts, b));
  GenerateResult rc = ValueOrDie(Generate(model(), p, opts, c));
  EXPECT_EQ(ra.generated, rb.generated);
  EXPECT_NE(ra.generated, rc.generated);
  // Sampling actually samples: not the greedy sequence.
  opts.sampling = {};
  opts.sampling.temperature = 0.f;
  Generator g(1234);
  GenerateResult greedy = ValueOrDie(Generate(model(), p, opts, g));
  EXPECT_NE(ra.generated, greedy.generated);
}

// top_k = 1 is greedy whatever the temperature and seed.
TEST_F(GenerateTest, TopKOneIsGreedy) {
  GenerateOptions opts;
  opts.max_new_tokens = 8;
  opts.sampling.temperature = 0.f;
  Tensor p = ValueOrDie(LeftPad({{1, 2, 3}}, 0));
  Generator g0(1);
  GenerateResult greedy = ValueOrDie(Generate(model(), p, opts, g0));
  opts.sampling.temperature = 2.0f;
  opts.sampling.top_k = 1;
  Generator g1(77);
  GenerateResult topk = ValueOrDie(Generate(model(), p, opts, g1));
  EXPECT_EQ(greedy.generated, topk.generated);
}

TEST_F(GenerateTest, StopTokensPerRow) {
  const std::vector<std::vector<int32_t>> prompts = {{4, 8, 15}, {30, 31}};
  Reference r0 = GreedyReference(model(), prompts[0], 10);
  Reference r1 = GreedyReference(model(), prompts[1], 10);
  // Row 0 stops at its 3rd token (choose one that row 0 did not produce earlier).
  const int32_t stop = r0.tokens[2];
  ASSERT_TRUE(std::find(r0.tokens.begin(), r0.tokens.begin() + 2, stop) == r0.tokens.begin() + 2);
  const int64_t stop1 = std::find(r1.tokens.begin(), r1.tokens.end(), stop) - r1.tokens.begin();
  ASSERT_GT(stop1, 2) << "pick another seed: row 1 must not stop first";
  ASSERT_TRUE(model().SetupCaches(2, DType::kF32, 64).ok());
  GenerateOptions opts;
  opts.max_new_tokens = 10;
  opts.sampling.temperature = 0.f;
  opts.stop_tokens = {stop};
  opts.pad_id = 0;
  opts.return_logits = true;
  std::vector<std::vector<int32_t>> streamed(2);
  int calls = 0;
  opts.on_token = [&](const GenerationStep& step) {
    EXPECT_EQ(step.step, calls);
    ++calls;
    for (int r = 0; r < 2; ++r) {
      if (!step.stopped[r]) streamed[r].push_back(step.tokens[r]);
      if (step.stopped[r]) {
        EXPECT_EQ(step.tokens[r], 0);
      }
    }
  };
  Generator gen(5);
  GenerateResult out = ValueOrDie(Generate(model(), ValueOrDie(LeftPad(prompts, 0)), opts, gen));
  const int64_t n = std::min<int64_t>(10, stop1 + 1);
  EXPECT_EQ(out.num_generated, n);
  EXPECT_EQ(calls, n);
  EXPECT_EQ(out.generated[0], std::vector<int32_t>(r0.tokens.begin(), r0.tokens.begin() + 3));
  EXPECT_EQ(out.generated[1], std::vector<int32_t>(r1.tokens.begin(), r1.tokens.begin() + n));
  EXPECT_EQ(streamed[0], out.generated[0]);
  EXPECT_EQ(streamed[1], out.generated[1]);
  // Row 0 after its stop token: padding and zero logits.
  std::vector<int64_t> toks = ValueOrDie(out.tokens.ToInt64Vector());
  const int64_t width = 3 + n;
  for (int64_t t = 3; t < n; ++t) EXPECT_EQ(toks[3 + t], 0);
  EXPECT_EQ(toks[3 + 2], stop);
  EXPECT_EQ(toks[width + 0], 0);  // row 1's left padding
  std::vector<float> logits = ValueOrDie(out.logits.ToFloatVector());
  const int64_t v = model().vocab_size();
  for (int64_t t = 3; t < n; ++t) {
    for (int64_t i = 0; i < v; ++i) ASSERT_EQ(logits[t * v + i], 0.f);
  }
  EXPECT_NE(logits[2 * v], 0.f);
}

TEST_F(GenerateTest, StopsWhenEveryRowStopped) {
  Reference ref = GreedyReference(model(), {9, 9}, 4);
  GenerateOptions opts;
  opts.max_new_tokens = 30;
  opts.sampling.temperature = 0.f;
  opts.stop_tokens = {ref.tokens[0]};
  Generator gen(5);
  GenerateResult out = ValueOrDie(Generate(model(), ValueOrDie(LeftPad({{9, 9}}, 0)), opts, gen));
  EXPECT_EQ(out.num_generated, 1);
  EXPECT_EQ(out.tokens.shape(), (Shape{1, 3}));
}

TEST_F(GenerateTest, Errors) {
  GenerateOptions opts;
  opts.max_new_tokens = 0;
  Generator gen(1);
  Tensor p = ValueOrDie(LeftPad({{1, 2}}, 0));
  auto st = Generate(model(), p, opts, gen);
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(std::string(st.status().message()), HasSubstr("max_new_tokens (0)"));

  opts.max_new_tokens = 200;  // 2 + 200 > max_seq_len 128
  st = Generate(model(), p, opts, gen);
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(std::string(st.status().message()), HasSubstr("max_seq_len (128)"));

  opts.max_new_tokens = 4;
  Tensor all_pad = ValueOrDie(Tensor::Zeros({2, 3}, DType::kI64));
  st = Generate(model(), all_pad, opts, gen);
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(std::string(st.status().message()), HasSubstr("all padding"));

  Tensor out_of_vocab = ValueOrDie(LeftPad({{1, 500}}, 0));
  st = Generate(model(), out_of_vocab, opts, gen);
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(std::string(st.status().message()), HasSubstr("500"));

  ASSERT_TRUE(model().SetupCaches(1, DType::kF32, 4).ok());
  st = Generate(model(), p, opts, gen);  // needs 6 positions
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(std::string(st.status().message()), HasSubstr("4 positions"));
  st = Generate(model(), ValueOrDie(LeftPad({{1}, {2}}, 0)), opts, gen);  // batch 2 > 1
  ASSERT_FALSE(st.ok());
}

// A 1-D prompt and an i32 prompt work like [1, s] i64.
TEST_F(GenerateTest, AcceptsOneDimensionalAndInt32Prompts) {
  GenerateOptions opts;
  opts.max_new_tokens = 5;
  opts.sampling.temperature = 0.f;
  Generator gen(1);
  std::vector<int32_t> ids = {3, 4, 5};
  Tensor p32 = ValueOrDie(Tensor::FromVector(absl::MakeConstSpan(ids), {3}));
  GenerateResult a = ValueOrDie(Generate(model(), p32, opts, gen));
  GenerateResult b = ValueOrDie(Generate(model(), ValueOrDie(LeftPad({ids}, 0)), opts, gen));
  EXPECT_EQ(a.generated, b.generated);
  EXPECT_EQ(a.tokens.shape(), (Shape{1, 8}));
}

TEST_F(GenerateTest, GreedyDecodingOfNaNWeightsIsAnErrorNamingThePosition) {
  // A NaN in the embedding of the last prompt token spreads to every logit of that position.
  Tensor w = model().tok_embeddings().weight();
  const int64_t d = w.size(1);
  w.data<float>()[5 * d + 3] = std::numeric_limits<float>::quiet_NaN();
  GenerateOptions opts;
  opts.max_new_tokens = 4;
  opts.sampling.temperature = 0.f;
  Generator gen(1);
  auto st = Generate(model(), ValueOrDie(LeftPad({{1, 2, 5}}, 0)), opts, gen);
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(std::string(st.status().message()), HasSubstr("position 3"));
  EXPECT_THAT(std::string(st.status().message()), HasSubstr("not finite"));
  // Sampling already refused it; it still does.
  opts.sampling.temperature = 0.8f;
  EXPECT_FALSE(Generate(model(), ValueOrDie(LeftPad({{1, 2, 5}}, 0)), opts, gen).ok());
}

TEST_F(GenerateTest, HugeMaxNewTokensIsAnErrorNotAnOverflow) {
  GenerateOptions opts;
  Generator gen(1);
  for (int64_t n : {std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::max() - 1,
                    int64_t{1} << 62}) {
    opts.max_new_tokens = n;
    auto st = Generate(model(), ValueOrDie(LeftPad({{1, 2}}, 0)), opts, gen);
    ASSERT_FALSE(st.ok()) << n;
    EXPECT_THAT(std::string(st.status().message()), HasSubstr("max_seq_len (128)")) << n;
  }
}

}  // namespace
}  // namespace cctune
