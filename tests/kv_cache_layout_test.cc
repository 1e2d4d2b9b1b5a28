// Generation with the grouped KV cache (n_kv heads) against the old expanded one (n_h heads,
// torchtune before #1961): identical token ids, greedy and seeded top-k/top-p sampling, for
// batch 1 and a left-padded batch of 3; logits within 1e-5 at every step; cache bytes in the
// exact ratio n_h / n_kv. And generation without a cache gives the same greedy tokens.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/random.h"
#include "generation/generate.h"
#include "generation/model_loader.h"
#include "generation/test_models.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/shared_dir.h"

namespace cctune {
namespace {

struct HeadConfig {
  int64_t num_heads;
  int64_t num_kv_heads;
  std::string name;
};

const std::vector<std::vector<int32_t>>& BatchPrompts() {
  static const auto* prompts =
      new std::vector<std::vector<int32_t>>{{5, 17, 33, 2, 90}, {41}, {7, 7, 64}};
  return *prompts;
}

struct Sampling {
  std::string name;
  ops::SamplingParams params;
};

std::vector<Sampling> Samplings() {
  ops::SamplingParams greedy;
  greedy.temperature = 0.f;
  ops::SamplingParams topk;
  topk.temperature = 0.9f;
  topk.top_k = 12;
  ops::SamplingParams topp;
  topp.temperature = 1.1f;
  topp.top_p = 0.85f;
  ops::SamplingParams both;
  both.temperature = 0.8f;
  both.top_k = 30;
  both.top_p = 0.9f;
  return {{"greedy", greedy}, {"top_k", topk}, {"top_p", topp}, {"top_k_top_p", both}};
}

struct GenRun {
  GenerateResult result;
  size_t kv_bytes = 0;
};

GenRun GenerateWith(TransformerDecoder& model, const std::vector<std::vector<int32_t>>& prompts,
                    int64_t max_new_tokens, const ops::SamplingParams& sampling, bool cache,
                    KvCacheLayout layout, int64_t cache_len, uint64_t seed,
                    const std::vector<int32_t>& stop = {}) {
  model.DeleteCaches();
  if (cache) {
    CCTUNE_CHECK_OK(
        model.SetupCaches(static_cast<int64_t>(prompts.size()), DType::kF32, cache_len, layout));
  }
  GenerateOptions opts;
  opts.max_new_tokens = max_new_tokens;
  opts.sampling = sampling;
  opts.pad_id = 0;
  opts.stop_tokens = stop;
  opts.return_logits = true;
  Generator gen(seed);
  GenRun run;
  run.result = ValueOrDie(Generate(model, ValueOrDie(LeftPad(prompts, 0)), opts, gen));
  run.kv_bytes = model.KvCacheBytes();
  model.DeleteCaches();
  return run;
}

void ExpectSameGeneration(const GenRun& a, const GenRun& b, const std::string& what) {
  EXPECT_EQ(a.result.generated, b.result.generated) << what;
  EXPECT_EQ(ValueOrDie(a.result.tokens.ToInt64Vector()),
            ValueOrDie(b.result.tokens.ToInt64Vector()))
      << what;
  ASSERT_EQ(a.result.logits.shape(), b.result.logits.shape()) << what;
  std::vector<float> la = ValueOrDie(a.result.logits.ToFloatVector());
  std::vector<float> lb = ValueOrDie(b.result.logits.ToFloatVector());
  double worst = 0;
  for (size_t i = 0; i < la.size(); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(la[i]) - lb[i]));
  }
  EXPECT_LE(worst, 1e-5) << what;
}

class KvCacheLayoutTest : public ::testing::TestWithParam<HeadConfig> {
 protected:
  void SetUp() override {
    testing::RandomModelSpec spec;
    spec.num_heads = GetParam().num_heads;
    spec.num_kv_heads = GetParam().num_kv_heads;
    spec.embed_dim = 64;  // head_dim 8
    spec.vocab_size = 101;
    spec.intermediate_dim = 96;
    spec.num_layers = 2;
    spec.seed = 100 + GetParam().num_kv_heads;
    model_ = ValueOrDie(testing::RandomModel(spec));
  }
  LoadedModel model_;
};

TEST_P(KvCacheLayoutTest, GroupedAndExpandedGenerateTheSame) {
  const HeadConfig& h = GetParam();
  TransformerDecoder& model = *model_.model;
  const int64_t n = 16, cache_len = 40;
  for (const Sampling& s : Samplings()) {
    for (bool batch : {false, true}) {
      std::vector<std::vector<int32_t>> prompts = BatchPrompts();
      if (!batch) prompts.resize(1);
      const std::string what = absl::StrCat(h.name, " ", s.name, batch ? " batch 3" : " batch 1");
      GenRun grouped =
          GenerateWith(model, prompts, n, s.params, true, KvCacheLayout::kGrouped, cache_len, 4242);
      GenRun expanded = GenerateWith(model, prompts, n, s.params, true, KvCacheLayout::kExpanded,
                                     cache_len, 4242);
      ExpectSameGeneration(grouped, expanded, what);
      EXPECT_EQ(grouped.result.num_generated, n) << what;
      // 2 (k, v) x layers x b x heads x positions x h_d x 4 bytes.
      const size_t b = prompts.size();
      EXPECT_EQ(grouped.kv_bytes, 2 * 2 * b * h.num_kv_heads * cache_len * 8 * 4) << what;
      EXPECT_EQ(expanded.kv_bytes, 2 * 2 * b * h.num_heads * cache_len * 8 * 4) << what;
      EXPECT_EQ(expanded.kv_bytes * h.num_kv_heads, grouped.kv_bytes * h.num_heads) << what;
    }
  }
}

// Sampling really samples here: seeded runs differ from greedy and from another seed (so the
// equality above is not trivially greedy).
TEST_P(KvCacheLayoutTest, SamplingDependsOnTheSeed) {
  TransformerDecoder& model = *model_.model;
  const ops::SamplingParams p = Samplings()[3].params;
  GenRun a = GenerateWith(model, BatchPrompts(), 16, p, true, KvCacheLayout::kGrouped, 40, 1);
  GenRun b = GenerateWith(model, BatchPrompts(), 16, p, true, KvCacheLayout::kGrouped, 40, 2);
  GenRun g = GenerateWith(model, BatchPrompts(), 16, Samplings()[0].params, true,
                          KvCacheLayout::kGrouped, 40, 1);
  EXPECT_NE(a.result.generated, b.result.generated);
  EXPECT_NE(a.result.generated, g.result.generated);
}

TEST_P(KvCacheLayoutTest, StopTokensAgreeAcrossLayouts) {
  TransformerDecoder& model = *model_.model;
  const ops::SamplingParams greedy = Samplings()[0].params;
  GenRun probe =
      GenerateWith(model, BatchPrompts(), 12, greedy, false, KvCacheLayout::kGrouped, 0, 1);
  const std::vector<int32_t> stop = {probe.result.generated[1][3]};  // row 1 stops early
  GenRun grouped =
      GenerateWith(model, BatchPrompts(), 12, greedy, true, KvCacheLayout::kGrouped, 40, 1, stop);
  GenRun expanded =
      GenerateWith(model, BatchPrompts(), 12, greedy, true, KvCacheLayout::kExpanded, 40, 1, stop);
  ExpectSameGeneration(grouped, expanded, GetParam().name + " with a stop token");
  EXPECT_LE(grouped.result.generated[1].size(), 4u);
}

TEST_P(KvCacheLayoutTest, WithAndWithoutCacheSameGreedyTokens) {
  TransformerDecoder& model = *model_.model;
  const ops::SamplingParams greedy = Samplings()[0].params;
  for (bool batch : {false, true}) {
    std::vector<std::vector<int32_t>> prompts = BatchPrompts();
    if (!batch) prompts.resize(1);
    GenRun none = GenerateWith(model, prompts, 16, greedy, false, KvCacheLayout::kGrouped, 0, 1);
    EXPECT_EQ(none.kv_bytes, 0u);
    for (KvCacheLayout layout : {KvCacheLayout::kGrouped, KvCacheLayout::kExpanded}) {
      GenRun cached = GenerateWith(model, prompts, 16, greedy, true, layout, 40, 1);
      EXPECT_EQ(none.result.generated, cached.result.generated)
          << GetParam().name << " " << KvCacheLayoutName(layout) << " batch " << prompts.size();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(HeadGrid, KvCacheLayoutTest,
                         ::testing::Values(HeadConfig{8, 8, "MHA_8_8"}, HeadConfig{8, 4, "GQA_8_4"},
                                           HeadConfig{8, 2, "GQA_8_2"},
                                           HeadConfig{8, 1, "MQA_8_1"}),
                         [](const auto& info) { return info.param.name; });

// stories260K (GQA 8/4), when ../shared is present.
TEST(KvCacheLayoutStories260KTest, GroupedAndExpandedGenerateTheSame) {
  auto bin = testing::SharedFile("models/stories260K/stories260K.bin");
  if (!bin.ok()) GTEST_SKIP() << bin.status();
  LoadedModel m = ValueOrDie(LoadLlama2cModel(*bin));
  const std::vector<std::vector<int32_t>> prompts = {{1, 403, 407, 261}, {1, 410}, {1}};
  for (const Sampling& s : Samplings()) {
    for (bool batch : {false, true}) {
      std::vector<std::vector<int32_t>> p = prompts;
      if (!batch) p.resize(1);
      const std::string what = absl::StrCat("stories260K ", s.name, " batch ", p.size());
      GenRun grouped =
          GenerateWith(*m.model, p, 48, s.params, true, KvCacheLayout::kGrouped, 64, 9);
      GenRun expanded =
          GenerateWith(*m.model, p, 48, s.params, true, KvCacheLayout::kExpanded, 64, 9);
      ExpectSameGeneration(grouped, expanded, what);
      EXPECT_EQ(expanded.kv_bytes, 2 * grouped.kv_bytes) << what;
      EXPECT_EQ(grouped.kv_bytes, 2u * 5 * p.size() * 4 * 64 * 8 * 4) << what;
      if (s.name == "greedy") {
        GenRun none = GenerateWith(*m.model, p, 48, s.params, false, KvCacheLayout::kGrouped, 0, 9);
        EXPECT_EQ(none.result.generated, grouped.result.generated) << what;
      }
    }
  }
}

}  // namespace
}  // namespace cctune
