#include "modules/attention.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "modules/parameters.h"
#include "modules/reference.h"

namespace cctune {
namespace {

using reference::MaxRelError;
using reference::ToVec;
using reference::Vec;
using ::testing::HasSubstr;

struct Config {
  int64_t embed_dim = 24;
  int64_t num_heads = 4;
  int64_t num_kv_heads = 2;
  int64_t head_dim = 6;
  bool bias = false;
  bool qk_norm = false;
  bool is_causal = true;
  ops::RopePairing pairing = ops::RopePairing::kInterleaved;
  int64_t max_seq_len = 32;
};

MultiHeadAttentionArgs Args(const Config& c) {
  MultiHeadAttentionArgs a;
  a.embed_dim = c.embed_dim;
  a.num_heads = c.num_heads;
  a.num_kv_heads = c.num_kv_heads;
  a.head_dim = c.head_dim;
  a.q_proj = std::make_unique<Linear>(c.embed_dim, c.num_heads * c.head_dim, c.bias);
  a.k_proj = std::make_unique<Linear>(c.embed_dim, c.num_kv_heads * c.head_dim, c.bias);
  a.v_proj = std::make_unique<Linear>(c.embed_dim, c.num_kv_heads * c.head_dim, c.bias);
  a.output_proj = std::make_unique<Linear>(c.num_heads * c.head_dim, c.embed_dim);
  a.pos_embeddings =
      std::make_shared<RotaryPositionalEmbeddings>(c.head_dim, c.max_seq_len, 10000.0, c.pairing);
  if (c.qk_norm) {
    a.q_norm = std::make_unique<RMSNorm>(c.head_dim, 1e-5f);
    a.k_norm = std::make_unique<RMSNorm>(c.head_dim, 1e-5f);
  }
  a.max_seq_len = c.max_seq_len;
  a.is_causal = c.is_causal;
  return a;
}

// An attention module with random weights (biases and norm scales random too).
struct Built {
  std::unique_ptr<MultiHeadAttention> mha;
  ParameterArena arena;
};
Built Build(const Config& c, uint64_t seed) {
  Built b{ValueOrDie(MultiHeadAttention::Create(Args(c))), {}};
  b.arena = ValueOrDie(ParameterArena::Create(*b.mha, DType::kF32, Device::Cpu()));
  Generator gen(seed);
  for (auto& [name, t] : b.arena.named_tensors()) {
    Tensor view = t;
    const bool scale = name.find("norm") != std::string::npos;
    CCTUNE_CHECK_OK(FillNormal(view, scale ? 1.0 : 0.0, scale ? 0.3 : 0.3, gen));
  }
  return b;
}

Vec Param(const Built& b, const std::string& name) {
  auto t = b.arena.Get(name);
  return t.ok() ? ToVec(*t) : Vec{};
}

// fp64 torchtune MultiHeadAttention (self-attention, no cache) on x [b, s, d].
Vec ReferenceMha(const Config& c, const Built& m, const Vec& x, int64_t b, int64_t s,
                 std::vector<int64_t> positions, const std::vector<bool>& mask) {
  const int64_t d = c.embed_dim, n_h = c.num_heads, n_kv = c.num_kv_heads, h_d = c.head_dim;
  if (positions.empty()) {
    for (int64_t i = 0; i < b * s; ++i) positions.push_back(i % s);
  }
  Vec q =
      reference::Linear(x, b * s, d, Param(m, "q_proj.weight"), n_h * h_d, Param(m, "q_proj.bias"));
  Vec k = reference::Linear(x, b * s, d, Param(m, "k_proj.weight"), n_kv * h_d,
                            Param(m, "k_proj.bias"));
  Vec v = reference::Linear(x, b * s, d, Param(m, "v_proj.weight"), n_kv * h_d,
                            Param(m, "v_proj.bias"));
  const Vec inv_freq = reference::RopeInvFrequencies(h_d, 10000.0);
  q = reference::Rope(q, b, s, n_h, h_d, positions, inv_freq, c.pairing);
  k = reference::Rope(k, b, s, n_kv, h_d, positions, inv_freq, c.pairing);
  if (c.qk_norm) {
    q = reference::RmsNorm(q, b * s * n_h, h_d, Param(m, "q_norm.scale"), 1e-5);
    k = reference::RmsNorm(k, b * s * n_kv, h_d, Param(m, "k_norm.scale"), 1e-5);
  }
  const Vec attn = reference::Attention(q, k, v, b, s, s, n_h, n_kv, h_d, mask, c.is_causal);
  return reference::Linear(attn, b * s, n_h * h_d, Param(m, "output_proj.weight"), d);
}

Tensor Random(Shape shape, uint64_t seed) {
  Generator gen(seed);
  return ValueOrDie(RandomNormal(std::move(shape), DType::kF32, gen));
}

Tensor Slice(const Tensor& t, int dim, int64_t start, int64_t len) {
  return ValueOrDie(ValueOrDie(t.Narrow(dim, start, len)).Contiguous());
}

Tensor BoolMask(const std::vector<bool>& m, Shape shape) {
  Tensor t = ValueOrDie(Tensor::Empty(std::move(shape), DType::kBool));
  for (size_t i = 0; i < m.size(); ++i) t.data<bool>()[i] = m[i];
  return t;
}

// Rows [start, start + len) of a causal mask over `cols` columns: [b, len, cols].
Tensor CausalRows(int64_t b, int64_t start, int64_t len, int64_t cols) {
  std::vector<bool> m;
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t i = start; i < start + len; ++i) {
      for (int64_t j = 0; j < cols; ++j) m.push_back(j <= i);
    }
  }
  return BoolMask(m, {b, len, cols});
}

Tensor Positions(int64_t b, int64_t start, int64_t len) {
  std::vector<int64_t> p;
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t i = 0; i < len; ++i) p.push_back(start + i);
  }
  return ValueOrDie(Tensor::FromVector(p, {b, len}));
}

// ---- Construction ----

TEST(MultiHeadAttentionTest, ConstructorErrorsNameTheValues) {
  Config c;
  c.num_heads = 32;
  c.num_kv_heads = 5;
  c.embed_dim = 64;
  c.head_dim = 2;
  auto r = MultiHeadAttention::Create(Args(c));
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("num_heads (32) must be divisible by num_kv_heads (5)"));

  c = Config{};
  c.embed_dim = 26;
  r = MultiHeadAttention::Create(Args(c));
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("embed_dim (26) must be divisible by num_heads (4)"));

  c = Config{};
  MultiHeadAttentionArgs a = Args(c);
  a.k_proj = std::make_unique<Linear>(24, 18);
  r = MultiHeadAttention::Create(std::move(a));
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("k_proj maps 24 -> 18, expected 24 -> 12"));

  a = Args(c);
  a.q_norm = std::make_unique<RMSNorm>(6);
  r = MultiHeadAttention::Create(std::move(a));
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("q and k norm must be set together"));

  a = Args(c);
  a.pos_embeddings = std::make_shared<RotaryPositionalEmbeddings>(8, 32);
  r = MultiHeadAttention::Create(std::move(a));
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("pos_embeddings dim (8) must equal head_dim (6)"));

  a = Args(c);
  a.kv_cache = ValueOrDie(KVCache::Create(1, 8, 3, 6, DType::kF32));
  r = MultiHeadAttention::Create(std::move(a));
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("kv_cache holds 3 heads"));

  a = Args(c);
  a.output_proj = nullptr;
  EXPECT_FALSE(MultiHeadAttention::Create(std::move(a)).ok());
}

TEST(MultiHeadAttentionTest, ParametersUseTorchtuneNames) {
  Config c;
  c.bias = true;
  c.qk_norm = true;
  auto mha = ValueOrDie(MultiHeadAttention::Create(Args(c)));
  std::vector<std::string> names;
  for (const auto& [n, p] : mha->NamedParameters()) names.push_back(n);
  EXPECT_THAT(names, ::testing::ElementsAre("q_proj.weight", "q_proj.bias", "k_proj.weight",
                                            "k_proj.bias", "v_proj.weight", "v_proj.bias",
                                            "output_proj.weight", "q_norm.scale", "k_norm.scale"));
}

// ---- Training path (no cache) ----

class NoCacheTest : public ::testing::TestWithParam<std::pair<int64_t, int64_t>> {};

TEST_P(NoCacheTest, CausalMaskAndPositionsMatchFp64Reference) {
  Config c;
  std::tie(c.num_heads, c.num_kv_heads) = GetParam();
  c.embed_dim = c.num_heads * 4;
  const int64_t b = 2, s = 7;
  Built m = Build(c, 100 + c.num_heads * 10 + c.num_kv_heads);
  Tensor x = Random({b, s, c.embed_dim}, 1);
  const Vec xv = ToVec(x);

  Tensor y = ValueOrDie((*m.mha)(x));
  EXPECT_LE(MaxRelError(ToVec(y), ReferenceMha(c, m, xv, b, s, {}, {})), 1e-5);

  // Explicit random mask (each query sees itself).
  std::vector<bool> mask(b * s * s);
  Generator gen(2);
  for (int64_t i = 0; i < b * s * s; ++i) {
    mask[i] = gen.Uniform() < 0.5 || (i % (s * s)) / s == (i % s);
  }
  Tensor mask_t = BoolMask(mask, {b, s, s});
  y = ValueOrDie((*m.mha)(x, &mask_t));
  EXPECT_LE(MaxRelError(ToVec(y), ReferenceMha(c, m, xv, b, s, {}, mask)), 1e-5);

  // Per-row positions (packed sequences / left padding).
  std::vector<int64_t> pos;
  for (int64_t i = 0; i < b * s; ++i) pos.push_back((i / s) * 9 + i % s);
  Tensor pos_t = ValueOrDie(Tensor::FromVector(pos, {b, s}));
  y = ValueOrDie((*m.mha)(x, nullptr, &pos_t));
  EXPECT_LE(MaxRelError(ToVec(y), ReferenceMha(c, m, xv, b, s, pos, {})), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Heads, NoCacheTest,
                         ::testing::Values(std::make_pair(4, 4), std::make_pair(4, 2),
                                           std::make_pair(4, 1), std::make_pair(6, 3),
                                           std::make_pair(6, 2)));

TEST(MultiHeadAttentionTest, BiasesQkNormHalfSplitAndNonCausal) {
  Config c;
  c.bias = true;
  c.qk_norm = true;
  c.pairing = ops::RopePairing::kHalfSplit;
  c.is_causal = false;
  const int64_t b = 3, s = 5;
  Built m = Build(c, 7);
  Tensor x = Random({b, s, c.embed_dim}, 8);
  Tensor y = ValueOrDie((*m.mha)(x));
  EXPECT_LE(MaxRelError(ToVec(y), ReferenceMha(c, m, ToVec(x), b, s, {}, {})), 1e-5);
}

TEST(MultiHeadAttentionTest, RejectsBadInputs) {
  Config c;
  Built m = Build(c, 9);
  Tensor x = Random({2, 5, 24}, 1);
  Tensor bad_mask = CausalRows(2, 0, 5, 6);
  absl::Status s = m.mha->Forward(x, x, &bad_mask);
  EXPECT_THAT(std::string(s.message()), HasSubstr("[b, s, s_kv] = [2, 5, 5]"));
  Tensor float_mask = Random({2, 5, 5}, 2);
  EXPECT_THAT(std::string(m.mha->Forward(x, x, &float_mask).message()), HasSubstr("bool"));
  Tensor wrong = Random({2, 5, 23}, 3);
  EXPECT_FALSE((*m.mha)(wrong).ok());
}

// ---- Generation path (cache) ----

class CacheTest : public ::testing::TestWithParam<std::tuple<int64_t, KvCacheLayout, bool>> {};

// Prefill then single-token decode through the cache equals one causal pass over everything.
TEST_P(CacheTest, PrefillThenDecodeEqualsFullForward) {
  Config c;
  c.num_heads = 8;
  c.num_kv_heads = std::get<0>(GetParam());
  c.embed_dim = 32;
  c.head_dim = 4;
  const KvCacheLayout layout = std::get<1>(GetParam());
  const bool cache_wide_mask = std::get<2>(GetParam());
  const int64_t b = 2, s = 9, prefill = 4, max_len = 16;
  Built m = Build(c, 20 + c.num_kv_heads);
  Tensor x = Random({b, s, c.embed_dim}, 21);
  const Vec want = ReferenceMha(c, m, ToVec(x), b, s, {}, {});

  ASSERT_TRUE(m.mha->SetupCache(/*batch_size=*/3, DType::kF32, max_len, layout).ok());
  const int64_t cached_heads = layout == KvCacheLayout::kGrouped ? c.num_kv_heads : c.num_heads;
  EXPECT_EQ(m.mha->kv_cache()->num_kv_heads(), cached_heads);
  Vec got;
  int64_t pos = 0;
  for (int64_t len : {prefill, int64_t{1}, int64_t{1}, int64_t{2}, int64_t{1}}) {
    Tensor xs = Slice(x, 1, pos, len);
    Tensor mask = CausalRows(b, pos, len, cache_wide_mask ? max_len : pos + len);
    Tensor input_pos = Positions(b, pos, len);
    Tensor y = ValueOrDie((*m.mha)(xs, &mask, &input_pos));
    Vec yv = ToVec(y);
    got.resize(0);
    pos += len;
    EXPECT_EQ(m.mha->kv_cache()->Size(), pos);
    // Compare this chunk with the matching rows of the full pass.
    for (int64_t bi = 0; bi < b; ++bi) {
      Vec row_want(want.begin() + (bi * s + pos - len) * c.embed_dim,
                   want.begin() + (bi * s + pos) * c.embed_dim);
      Vec row_got(yv.begin() + bi * len * c.embed_dim, yv.begin() + (bi + 1) * len * c.embed_dim);
      EXPECT_LE(MaxRelError(row_got, row_want), 1e-5) << "pos " << pos << " batch " << bi;
    }
  }
  EXPECT_EQ(pos, s);
}

INSTANTIATE_TEST_SUITE_P(Layouts, CacheTest,
                         ::testing::Combine(::testing::Values(8, 4, 1),
                                            ::testing::Values(KvCacheLayout::kGrouped,
                                                              KvCacheLayout::kExpanded),
                                            ::testing::Bool()));

TEST(MultiHeadAttentionTest, GroupedAndExpandedLayoutsAgreeWithMemoryInRatio) {
  for (int64_t n_kv : {8, 2, 1}) {
    Config c;
    c.num_heads = 8;
    c.num_kv_heads = n_kv;
    c.embed_dim = 32;
    c.head_dim = 4;
    Built grouped = Build(c, 30), expanded = Build(c, 30);
    ASSERT_TRUE(grouped.mha->SetupCache(2, DType::kF32, 12, KvCacheLayout::kGrouped).ok());
    ASSERT_TRUE(expanded.mha->SetupCache(2, DType::kF32, 12, KvCacheLayout::kExpanded).ok());
    EXPECT_EQ(expanded.mha->kv_cache()->Bytes() * n_kv, grouped.mha->kv_cache()->Bytes() * 8);
    EXPECT_EQ(grouped.mha->kv_cache()->Bytes(), size_t{2} * 2 * n_kv * 12 * 4 * 4);
    Tensor x = Random({2, 10, 32}, 31 + n_kv);
    int64_t pos = 0;
    for (int64_t len : {6, 1, 1, 1, 1}) {
      Tensor xs = Slice(x, 1, pos, len);
      Tensor mask = CausalRows(2, pos, len, 12);
      Tensor input_pos = Positions(2, pos, len);
      const Vec a = ToVec(ValueOrDie((*grouped.mha)(xs, &mask, &input_pos)));
      const Vec e = ToVec(ValueOrDie((*expanded.mha)(xs, &mask, &input_pos)));
      EXPECT_LE(MaxRelError(a, e), 1e-6) << "n_kv " << n_kv << " pos " << pos;
      pos += len;
    }
  }
}

TEST(MultiHeadAttentionTest, DecodeReadsOnlyTheFilledPartOfTheCache) {
  Config c;
  c.embed_dim = 16;
  c.head_dim = 4;
  const int64_t b = 2, max_len = 20;
  Built m = Build(c, 40);
  Tensor x = Random({b, 6, c.embed_dim}, 41);
  const Vec want = ReferenceMha(c, m, ToVec(x), b, 6, {}, {});
  ASSERT_TRUE(m.mha->SetupCache(b, DType::kF32, max_len).ok());
  Tensor mask = CausalRows(b, 0, 5, 5);
  Tensor input_pos = Positions(b, 0, 5);
  ASSERT_TRUE((*m.mha)(Slice(x, 1, 0, 5), &mask, &input_pos).ok());
  // Poison every unfilled slot: a kernel reading max_seq_len positions would produce NaN.
  for (const Tensor* cache : {&m.mha->kv_cache()->k_cache(), &m.mha->kv_cache()->v_cache()}) {
    Tensor rest = ValueOrDie(cache->Narrow(2, 5, max_len - 5));
    ASSERT_TRUE(
        rest.CopyFrom(ValueOrDie(Tensor::Full(
                          rest.shape(), std::numeric_limits<double>::quiet_NaN(), DType::kF32)))
            .ok());
  }
  mask = CausalRows(b, 5, 1, 6);
  input_pos = Positions(b, 5, 1);
  const Vec y = ToVec(ValueOrDie((*m.mha)(Slice(x, 1, 5, 1), &mask, &input_pos)));
  for (int64_t bi = 0; bi < b; ++bi) {
    Vec row_want(want.begin() + (bi * 6 + 5) * 16, want.begin() + (bi * 6 + 6) * 16);
    Vec row_got(y.begin() + bi * 16, y.begin() + (bi + 1) * 16);
    EXPECT_LE(MaxRelError(row_got, row_want), 1e-5);
  }
}

TEST(MultiHeadAttentionTest, BF16CacheStaysClose) {
  Config c;
  Built m = Build(c, 50);
  Tensor x = Random({1, 6, 24}, 51);
  const Vec want = ReferenceMha(c, m, ToVec(x), 1, 6, {}, {});
  ASSERT_TRUE(m.mha->SetupCache(1, DType::kBF16, 8).ok());
  EXPECT_EQ(m.mha->kv_cache()->dtype(), DType::kBF16);
  Tensor mask = CausalRows(1, 0, 6, 8);
  Tensor input_pos = Positions(1, 0, 6);
  const Vec y = ToVec(ValueOrDie((*m.mha)(x, &mask, &input_pos)));
  EXPECT_LE(MaxRelError(y, want), 2e-2);
  EXPECT_GT(MaxRelError(y, want), 0.0);  // the cache really is bf16
}

TEST(MultiHeadAttentionTest, CacheErrorsLeaveTheCacheUnchanged) {
  Config c;
  Built m = Build(c, 60);
  EXPECT_EQ(m.mha->ResetCache().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(m.mha->SetupCache(2, DType::kF32, 8).ok());
  EXPECT_EQ(m.mha->SetupCache(2, DType::kF32, 8).code(), absl::StatusCode::kFailedPrecondition);
  Tensor x = Random({2, 6, 24}, 61);
  Tensor mask = CausalRows(2, 0, 6, 8);
  Tensor input_pos = Positions(2, 0, 6);
  ASSERT_TRUE((*m.mha)(x, &mask, &input_pos).ok());
  // 6 + 6 > 8: refused before anything is written.
  Tensor mask2 = CausalRows(2, 6, 6, 8);
  Tensor pos2 = Positions(2, 6, 6);
  absl::Status s = m.mha->Forward(x, x, &mask2, &pos2);
  ASSERT_EQ(s.code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(std::string(s.message()), HasSubstr("sequence length of 12"));
  EXPECT_EQ(m.mha->kv_cache()->Size(), 6);
  // A mask that fits neither the filled length (7) nor the cache (8).
  Tensor x1 = Slice(x, 1, 0, 1);
  Tensor bad = CausalRows(2, 6, 1, 5);
  Tensor pos1 = Positions(2, 6, 1);
  s = m.mha->Forward(x1, x1, &bad, &pos1);
  EXPECT_THAT(std::string(s.message()), HasSubstr("[2, 1, 7] (or [2, 1, 8] for the whole cache)"));
  EXPECT_EQ(m.mha->kv_cache()->Size(), 6);
  // Batch larger than the cache.
  Tensor x3 = Random({3, 1, 24}, 62);
  Tensor mask3 = CausalRows(3, 6, 1, 8);
  Tensor pos3 = Positions(3, 6, 1);
  EXPECT_FALSE(m.mha->Forward(x3, x3, &mask3, &pos3).ok());
  EXPECT_EQ(m.mha->kv_cache()->Size(), 6);
  ASSERT_TRUE(m.mha->ResetCache().ok());
  EXPECT_EQ(m.mha->kv_cache()->Size(), 0);
  m.mha->DeleteCache();
  EXPECT_FALSE(m.mha->HasCache());
}

// The arena puts q/k/v weights back to back, so one GEMM computes all three; separately
// allocated weights take the three-GEMM path. Both must agree.
TEST(MultiHeadAttentionTest, FusedAndSeparateQkvProjectionsAgree) {
  Config c;
  Built fused = Build(c, 70);
  auto separate = ValueOrDie(MultiHeadAttention::Create(Args(c)));
  separate->ForEachParameter(Module::ParameterFn([&](const std::string& name, Parameter& p) {
    p.value = ValueOrDie(ValueOrDie(fused.arena.Get(name)).Clone());
  }));
  ASSERT_TRUE(fused.mha->FusedQkvWeight().has_value());
  EXPECT_EQ(fused.mha->FusedQkvWeight()->shape(), (Shape{(4 + 2 * 2) * 6, 24}));
  EXPECT_FALSE(separate->FusedQkvWeight().has_value());
  Tensor x = Random({2, 5, 24}, 71);
  const Vec a = ToVec(ValueOrDie((*fused.mha)(x)));
  const Vec b = ToVec(ValueOrDie((*separate)(x)));
  EXPECT_LE(MaxRelError(a, b), 1e-6);
  EXPECT_LE(MaxRelError(a, ReferenceMha(c, fused, ToVec(x), 2, 5, {}, {})), 1e-5);
}

TEST(MultiHeadAttentionTest, SetupCacheNeedsMaterialisedParameters) {
  auto mha = ValueOrDie(MultiHeadAttention::Create(Args(Config{})));
  EXPECT_EQ(mha->SetupCache(1, DType::kF32, 8).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ValueOrDie(ParseKvCacheLayout("expanded")), KvCacheLayout::kExpanded);
  EXPECT_STREQ(KvCacheLayoutName(KvCacheLayout::kGrouped), "grouped");
  EXPECT_FALSE(ParseKvCacheLayout("paged").ok());
}

}  // namespace
}  // namespace cctune
