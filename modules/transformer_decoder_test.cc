#include "modules/transformer_decoder.h"

#include <optional>
#include <string>
#include <vector>

#include "core/random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/gemm/gemm.h"
#include "modules/parameters.h"
#include "modules/reference.h"
#include "modules/tied_linear.h"

namespace cctune {
namespace {

using reference::MaxRelError;
using reference::ToVec;
using reference::Vec;
using ::testing::HasSubstr;

constexpr int64_t kVocab = 19, kD = 16, kLayers = 2, kHeads = 4, kKvHeads = 2, kHeadDim = 4,
                  kFfn = 24, kMaxSeqLen = 32;
constexpr float kEps = 1e-5f;

std::unique_ptr<TransformerDecoder> MakeDecoder(bool tied, int num_layers = kLayers) {
  auto rope = std::make_shared<RotaryPositionalEmbeddings>(kHeadDim, kMaxSeqLen);
  TransformerDecoder::Layers layers;
  for (int i = 0; i < num_layers; ++i) {
    MultiHeadAttentionArgs a;
    a.embed_dim = kD;
    a.num_heads = kHeads;
    a.num_kv_heads = kKvHeads;
    a.head_dim = kHeadDim;
    a.q_proj = std::make_unique<Linear>(kD, kHeads * kHeadDim);
    a.k_proj = std::make_unique<Linear>(kD, kKvHeads * kHeadDim);
    a.v_proj = std::make_unique<Linear>(kD, kKvHeads * kHeadDim);
    a.output_proj = std::make_unique<Linear>(kHeads * kHeadDim, kD);
    a.pos_embeddings = rope;
    a.max_seq_len = kMaxSeqLen;
    layers.push_back(ValueOrDie(TransformerSelfAttentionLayer::Create(
        ValueOrDie(MultiHeadAttention::Create(std::move(a))),
        ValueOrDie(FeedForward::Create(std::make_unique<Linear>(kD, kFfn),
                                       std::make_unique<Linear>(kFfn, kD),
                                       std::make_unique<Linear>(kD, kFfn))),
        std::make_unique<RMSNorm>(kD, kEps), std::make_unique<RMSNorm>(kD, kEps))));
  }
  auto tok = std::make_unique<Embedding>(kVocab, kD);
  std::unique_ptr<Projection> output;
  if (tied) {
    output = std::make_unique<TiedLinear>(tok.get());
  } else {
    output = std::make_unique<Linear>(kD, kVocab);
  }
  return ValueOrDie(TransformerDecoder::Create(std::move(tok), std::move(layers),
                                               std::make_unique<RMSNorm>(kD, kEps),
                                               std::move(output), kMaxSeqLen));
}

struct Model {
  std::unique_ptr<TransformerDecoder> decoder;
  ParameterArena arena;
  Vec P(const std::string& n) const { return ToVec(ValueOrDie(arena.Get(n))); }
};

Model MakeModel(bool tied, uint64_t seed, DType weight_dtype = DType::kF32) {
  Model m{MakeDecoder(tied), {}};
  m.arena = ValueOrDie(ParameterArena::Create(*m.decoder, weight_dtype, Device::Cpu()));
  Generator gen(seed);
  for (auto& [name, t] : m.arena.named_tensors()) {
    Tensor v = t;
    const bool scale = name.find("norm") != std::string::npos;
    const bool table = name == "tok_embeddings.weight";
    CCTUNE_CHECK_OK(FillNormal(v, scale ? 1.0 : 0.0, table ? 1.0 : 0.3, gen));
  }
  return m;
}

// fp64 decoder over tokens [b, s] with positions [b * s] and an optional mask [b, s, s].
Vec ReferenceDecoder(const Model& m, bool tied, const std::vector<int64_t>& tokens, int64_t b,
                     int64_t s, std::vector<int64_t> pos = {}, const std::vector<bool>& mask = {}) {
  const int64_t rows = b * s;
  if (pos.empty()) {
    for (int64_t i = 0; i < rows; ++i) pos.push_back(i % s);
  }
  const Vec table = m.P("tok_embeddings.weight");
  Vec h(rows * kD);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t d = 0; d < kD; ++d) h[r * kD + d] = table[tokens[r] * kD + d];
  }
  const Vec inv = reference::RopeInvFrequencies(kHeadDim, 10000.0);
  for (int l = 0; l < static_cast<int>(m.decoder->num_layers()); ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    const Vec n1 = reference::RmsNorm(h, rows, kD, m.P(p + "sa_norm.scale"), kEps);
    Vec q = reference::Linear(n1, rows, kD, m.P(p + "attn.q_proj.weight"), kHeads * kHeadDim);
    Vec k = reference::Linear(n1, rows, kD, m.P(p + "attn.k_proj.weight"), kKvHeads * kHeadDim);
    Vec v = reference::Linear(n1, rows, kD, m.P(p + "attn.v_proj.weight"), kKvHeads * kHeadDim);
    q = reference::Rope(q, b, s, kHeads, kHeadDim, pos, inv, ops::RopePairing::kInterleaved);
    k = reference::Rope(k, b, s, kKvHeads, kHeadDim, pos, inv, ops::RopePairing::kInterleaved);
    const Vec att = reference::Linear(
        reference::Attention(q, k, v, b, s, s, kHeads, kKvHeads, kHeadDim, mask, true), rows,
        kHeads * kHeadDim, m.P(p + "attn.output_proj.weight"), kD);
    for (size_t i = 0; i < h.size(); ++i) h[i] += att[i];
    const Vec n2 = reference::RmsNorm(h, rows, kD, m.P(p + "mlp_norm.scale"), kEps);
    const Vec mlp = reference::Linear(
        reference::SiluMul(reference::Linear(n2, rows, kD, m.P(p + "mlp.w1.weight"), kFfn),
                           reference::Linear(n2, rows, kD, m.P(p + "mlp.w3.weight"), kFfn)),
        rows, kFfn, m.P(p + "mlp.w2.weight"), kD);
    for (size_t i = 0; i < h.size(); ++i) h[i] += mlp[i];
  }
  const Vec hn = reference::RmsNorm(h, rows, kD, m.P("norm.scale"), kEps);
  return reference::Linear(hn, rows, kD, tied ? table : m.P("output.weight"), kVocab);
}

std::vector<int64_t> RandomTokens(int64_t n, uint64_t seed) {
  Generator gen(seed);
  std::vector<int64_t> t(n);
  for (auto& x : t) x = static_cast<int64_t>(gen.UniformInt(kVocab));
  return t;
}

Tensor Tokens(const std::vector<int64_t>& t, int64_t b, int64_t s) {
  return ValueOrDie(Tensor::FromVector(t, {b, s}));
}

Tensor BoolMask(const std::vector<bool>& m, Shape shape) {
  Tensor t = ValueOrDie(Tensor::Empty(std::move(shape), DType::kBool));
  for (size_t i = 0; i < m.size(); ++i) t.data<bool>()[i] = m[i];
  return t;
}

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

// Columns [start, start + len) of tokens [b, s].
Tensor TokenSlice(const std::vector<int64_t>& t, int64_t b, int64_t s, int64_t start, int64_t len) {
  std::vector<int64_t> out;
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t i = start; i < start + len; ++i) out.push_back(t[bi * s + i]);
  }
  return Tokens(out, b, len);
}

// Rows of logits [b, s, v] for positions [start, start + len).
Vec LogitRows(const Vec& logits, int64_t b, int64_t s, int64_t start, int64_t len) {
  Vec out;
  for (int64_t bi = 0; bi < b; ++bi) {
    out.insert(out.end(), logits.begin() + (bi * s + start) * kVocab,
               logits.begin() + (bi * s + start + len) * kVocab);
  }
  return out;
}

class DecoderTest : public ::testing::TestWithParam<bool> {};

TEST_P(DecoderTest, ForwardMatchesFp64Reference) {
  const bool tied = GetParam();
  Model m = MakeModel(tied, 1);
  const int64_t b = 3, s = 7;
  const auto tokens = RandomTokens(b * s, 2);
  Tensor logits = ValueOrDie((*m.decoder)(Tokens(tokens, b, s)));
  EXPECT_EQ(logits.shape(), (Shape{b, s, kVocab}));
  EXPECT_EQ(logits.dtype(), DType::kF32);
  EXPECT_LE(MaxRelError(ToVec(logits), ReferenceDecoder(m, tied, tokens, b, s)), 1e-5);
  // i32 tokens work the same.
  std::vector<int32_t> t32(tokens.begin(), tokens.end());
  Tensor logits32 = ValueOrDie((*m.decoder)(ValueOrDie(Tensor::FromVector(t32, {b, s}))));
  EXPECT_EQ(ToVec(logits32), ToVec(logits));
}

TEST_P(DecoderTest, CachedDecodeMatchesTheFullForward) {
  const bool tied = GetParam();
  Model m = MakeModel(tied, 3);
  const int64_t b = 2, s = 9;
  const auto tokens = RandomTokens(b * s, 4);
  const Vec want = ReferenceDecoder(m, tied, tokens, b, s);
  ASSERT_TRUE(m.decoder->SetupCaches(b, DType::kF32, /*max_seq_len=*/16).ok());
  EXPECT_TRUE(m.decoder->CachesAreEnabled());
  for (int round = 0; round < 2; ++round) {  // the second round runs after ResetCaches
    int64_t pos = 0;
    for (int64_t len : {4, 1, 1, 2, 1}) {
      Tensor mask = CausalRows(b, pos, len, 16);
      Tensor input_pos = Positions(b, pos, len);
      Tensor logits =
          ValueOrDie((*m.decoder)(TokenSlice(tokens, b, s, pos, len), &mask, &input_pos));
      EXPECT_LE(MaxRelError(ToVec(logits), LogitRows(want, b, s, pos, len)), 1e-5)
          << "round " << round << " pos " << pos;
      pos += len;
      EXPECT_EQ(m.decoder->CacheSize(), pos);
    }
    ASSERT_TRUE(m.decoder->ResetCaches().ok());
    EXPECT_EQ(m.decoder->CacheSize(), 0);
  }
}

// Logits [b, s_out, v] with s_out < s: only the last s_out positions, equal to those rows of
// the fp64 reference; a logits shape outside [b, 1..s, v] is refused, naming it.
TEST_P(DecoderTest, LastPositionsOnlyMatchTheReference) {
  const bool tied = GetParam();
  Model m = MakeModel(tied, 5);
  const int64_t b = 3, s = 7;
  const auto tokens = RandomTokens(b * s, 6);
  const Vec want = ReferenceDecoder(m, tied, tokens, b, s);
  for (int64_t s_out : {1, 2, 7}) {
    Tensor logits = ValueOrDie(Tensor::Empty({b, s_out, kVocab}, DType::kF32));
    ASSERT_TRUE(m.decoder->Forward(logits, Tokens(tokens, b, s)).ok());
    EXPECT_LE(MaxRelError(ToVec(logits), LogitRows(want, b, s, s - s_out, s_out)), 1e-5)
        << "s_out " << s_out;
  }
  for (const Shape& bad : {Shape{b, s + 1, kVocab}, Shape{b, 0, kVocab}, Shape{b, 1, kVocab + 1},
                           Shape{b + 1, 1, kVocab}, Shape{b, kVocab}}) {
    Tensor logits = ValueOrDie(Tensor::Empty(bad, DType::kF32));
    absl::Status st = m.decoder->Forward(logits, Tokens(tokens, b, s));
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << ShapeToString(bad);
    EXPECT_NE(st.message().find(ShapeToString(bad)), std::string::npos) << st.message();
  }
}

INSTANTIATE_TEST_SUITE_P(TiedAndUntied, DecoderTest, ::testing::Bool());

// bf16 weights with f32 activations: the weights widen exactly, so the fp64 reference on the
// stored (bf16-rounded) values still matches at fp32 precision, cached or not.
// With the default routes the GEMMs may round the activations to bf16 (kernels/cpu/gemm/gemm.h:
// Zen 4/5): each GEMM's error is then <= ~2^-8 of sum |x·w|, ~1% of the logits after two layers.
TEST(TransformerDecoderTest, Bf16WeightsWithF32Activations) {
  Model m = MakeModel(/*tied=*/true, 14, DType::kBF16);
  ASSERT_EQ(m.arena.buffers().size(), 1u);
  EXPECT_EQ(m.arena.buffers()[0].dtype(), DType::kBF16);
  const int64_t b = 2, s = 6;
  const auto tokens = RandomTokens(b * s, 15);
  const Vec want = ReferenceDecoder(m, true, tokens, b, s);
  const bool rounds = cpu::gemm_internal::AutoBf16Route(1) != cpu::gemm_internal::GemmIsa::kAuto;
  for (bool exact : {true, false}) {
    std::optional<cpu::ScopedExactGemm> scope;
    if (exact) scope.emplace();
    const double tol = exact || !rounds ? 1e-5 : 3e-2;
    EXPECT_LE(MaxRelError(ToVec(ValueOrDie((*m.decoder)(Tokens(tokens, b, s)))), want), tol)
        << exact;
    ASSERT_TRUE(m.decoder->SetupCaches(b, DType::kF32, 8).ok());
    int64_t pos = 0;
    for (int64_t len : {4, 1, 1}) {
      Tensor mask = CausalRows(b, pos, len, 8);
      Tensor ip = Positions(b, pos, len);
      Tensor logits = ValueOrDie((*m.decoder)(TokenSlice(tokens, b, s, pos, len), &mask, &ip));
      EXPECT_LE(MaxRelError(ToVec(logits), LogitRows(want, b, s, pos, len)), tol)
          << pos << " " << exact;
      pos += len;
    }
    m.decoder->DeleteCaches();
  }
}

// The layers share one set of inference buffers: a 4-layer decoder keeps as many activation
// bytes between calls as a 1-layer one, and its output stays that of the fp64 reference.
TEST(TransformerDecoderTest, LayersShareTheInferenceBuffers) {
  const int64_t b = 2, s = 6;
  const auto tokens = RandomTokens(b * s, 8);
  size_t bytes[2] = {0, 0};
  for (int which = 0; which < 2; ++which) {
    Model m{MakeDecoder(false, which == 0 ? 1 : 4), {}};
    m.arena = ValueOrDie(ParameterArena::Create(*m.decoder, DType::kF32, Device::Cpu()));
    Generator gen(21);
    for (auto& [name, t] : m.arena.named_tensors()) {
      Tensor v = t;
      const bool scale = name.find("norm") != std::string::npos;
      CCTUNE_CHECK_OK(FillNormal(v, scale ? 1.0 : 0.0, 0.3, gen));
    }
    EXPECT_EQ(m.decoder->InferenceScratchBytes(), 0u);
    Tensor logits = ValueOrDie((*m.decoder)(Tokens(tokens, b, s)));
    EXPECT_LE(MaxRelError(ToVec(logits), ReferenceDecoder(m, false, tokens, b, s)), 1e-5)
        << (which == 0 ? 1 : 4) << " layers";
    bytes[which] = m.decoder->InferenceScratchBytes();
  }
  // Per layer: x-sized norm/branch/h buffers, q/k/v/attn, and the feed-forward's gate and up.
  EXPECT_GE(bytes[0], static_cast<size_t>(b * s * (3 * kD + 2 * kFfn)) * sizeof(float));
  EXPECT_EQ(bytes[1], bytes[0]);
}

TEST(TransformerDecoderTest, StateDictNamesFollowTorchtune) {
  auto untied = MakeDecoder(false);
  auto tied = MakeDecoder(true);
  std::vector<std::string> names;
  for (const auto& [n, p] : untied->NamedParameters()) names.push_back(n);
  ASSERT_EQ(names.size(), 1u + kLayers * 9 + 2);
  EXPECT_EQ(names.front(), "tok_embeddings.weight");
  EXPECT_EQ(names[1], "layers.0.attn.q_proj.weight");
  EXPECT_EQ(names[9], "layers.0.mlp_norm.scale");
  EXPECT_EQ(names[10], "layers.1.attn.q_proj.weight");
  EXPECT_EQ(names[names.size() - 2], "norm.scale");
  EXPECT_EQ(names.back(), "output.weight");
  EXPECT_EQ(tied->NamedParameters().size(), names.size() - 1);
  EXPECT_EQ(untied->NumParameters() - tied->NumParameters(), kVocab * kD);
}

TEST(TransformerDecoderTest, CachesRequireMaskAndPositionsAndRefuseBadCalls) {
  Model m = MakeModel(false, 5);
  const auto tokens = RandomTokens(2 * 6, 6);
  Tensor t = Tokens(tokens, 2, 6);
  EXPECT_EQ(m.decoder->ResetCaches().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE(m.decoder->CachesAreEnabled());
  ASSERT_TRUE(m.decoder->SetupCaches(2, DType::kF32, 8).ok());
  EXPECT_EQ(m.decoder->SetupCaches(2, DType::kF32, 8).code(),
            absl::StatusCode::kFailedPrecondition);

  Tensor mask = CausalRows(2, 0, 6, 8);
  Tensor pos = Positions(2, 0, 6);
  EXPECT_THAT(std::string((*m.decoder)(t).status().message()),
              HasSubstr("causal masks must be provided"));
  EXPECT_THAT(std::string((*m.decoder)(t, &mask).status().message()),
              HasSubstr("input positions must be provided"));
  ASSERT_TRUE((*m.decoder)(t, &mask, &pos).ok());
  EXPECT_EQ(m.decoder->CacheSize(), 6);

  // Past the cache: refused before any layer writes.
  Tensor mask2 = CausalRows(2, 6, 6, 8);
  Tensor pos2 = Positions(2, 6, 6);
  auto over = (*m.decoder)(t, &mask2, &pos2);
  ASSERT_FALSE(over.ok());
  EXPECT_THAT(std::string(over.status().message()), HasSubstr("sequence length of 12"));
  for (size_t i = 0; i < m.decoder->num_layers(); ++i) {
    EXPECT_EQ(m.decoder->layer(i).attn().kv_cache()->Size(), 6);
  }
  // A batch larger than the caches'.
  Tensor t3 = Tokens(RandomTokens(3, 7), 3, 1);
  Tensor mask3 = CausalRows(3, 6, 1, 8);
  Tensor pos3 = Positions(3, 6, 1);
  auto big = (*m.decoder)(t3, &mask3, &pos3);
  EXPECT_THAT(std::string(big.status().message()), HasSubstr("batch size of 2"));
  EXPECT_EQ(m.decoder->CacheSize(), 6);
  // Wrong input_pos shape.
  Tensor t1 = Tokens(RandomTokens(2, 8), 2, 1);
  Tensor mask1 = CausalRows(2, 6, 1, 8);
  EXPECT_THAT(std::string((*m.decoder)(t1, &mask1, &pos).status().message()),
              HasSubstr("input_pos must be [2, 1]"));
  m.decoder->DeleteCaches();
  EXPECT_FALSE(m.decoder->CachesAreSetup());
  EXPECT_EQ(m.decoder->KvCacheBytes(), 0u);
}

TEST(TransformerDecoderTest, SequenceLongerThanMaxSeqLenIsRefused) {
  Model m = MakeModel(true, 8);
  const auto tokens = RandomTokens(kMaxSeqLen + 1, 9);
  auto r = (*m.decoder)(Tokens(tokens, 1, kMaxSeqLen + 1));
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("seq_len (33) of input tensor should be smaller than max_seq_len (32)"));
  std::vector<float> bad_dtype(4, 0.f);
  EXPECT_FALSE((*m.decoder)(ValueOrDie(Tensor::FromVector(bad_dtype, {1, 4}))).ok());
}

TEST(TransformerDecoderTest, KvCacheBytesScaleWithLayout) {
  Model grouped = MakeModel(false, 10), expanded = MakeModel(false, 10);
  ASSERT_TRUE(grouped.decoder->SetupCaches(3, DType::kBF16, 20, KvCacheLayout::kGrouped).ok());
  ASSERT_TRUE(expanded.decoder->SetupCaches(3, DType::kBF16, 20, KvCacheLayout::kExpanded).ok());
  EXPECT_EQ(grouped.decoder->KvCacheBytes(),
            size_t{kLayers} * 2 * 3 * kKvHeads * 20 * kHeadDim * 2);
  EXPECT_EQ(expanded.decoder->KvCacheBytes() * kKvHeads, grouped.decoder->KvCacheBytes() * kHeads);
  // Both layouts decode identically.
  const auto tokens = RandomTokens(3 * 5, 11);
  int64_t pos = 0;
  for (int64_t len : {3, 1, 1}) {
    Tensor mask = CausalRows(3, pos, len, 20);
    Tensor ip = Positions(3, pos, len);
    Tensor t = TokenSlice(tokens, 3, 5, pos, len);
    const Vec a = ToVec(ValueOrDie((*grouped.decoder)(t, &mask, &ip)));
    const Vec e = ToVec(ValueOrDie((*expanded.decoder)(t, &mask, &ip)));
    EXPECT_LE(MaxRelError(a, e), 1e-6);
    pos += len;
  }
}

TEST(TransformerDecoderTest, LeftPaddedRowMatchesItsUnpaddedRun) {
  Model m = MakeModel(false, 12);
  const int64_t s = 6, pad = 2, max_len = 12;
  const auto tokens = RandomTokens(2 * s, 13);
  // Row 1 is left-padded: its first `pad` tokens are padding; real positions start at 0.
  std::vector<bool> mask;
  std::vector<int64_t> pos;
  for (int64_t bi = 0; bi < 2; ++bi) {
    const int64_t p = bi == 1 ? pad : 0;
    for (int64_t i = 0; i < s; ++i) {
      pos.push_back(std::max<int64_t>(0, i - p));
      for (int64_t j = 0; j < max_len; ++j) {
        // Real tokens see real tokens up to themselves; padding sees only itself.
        mask.push_back(i < p ? j == i : (j >= p && j <= i));
      }
    }
  }
  ASSERT_TRUE(m.decoder->SetupCaches(2, DType::kF32, max_len).ok());
  Tensor mask_t = BoolMask(mask, {2, s, max_len});
  Tensor pos_t = ValueOrDie(Tensor::FromVector(pos, {2, s}));
  const Vec logits = ToVec(ValueOrDie((*m.decoder)(Tokens(tokens, 2, s), &mask_t, &pos_t)));
  // The unpadded run of row 1's real tokens alone.
  std::vector<int64_t> real(tokens.begin() + s + pad, tokens.end());
  const Vec want = ReferenceDecoder(m, false, real, 1, s - pad);
  const Vec got(logits.begin() + (s + pad) * kVocab, logits.end());
  EXPECT_LE(MaxRelError(got, want), 1e-5);
  // Row 0 is unaffected by row 1's padding.
  std::vector<int64_t> row0(tokens.begin(), tokens.begin() + s);
  EXPECT_LE(MaxRelError(Vec(logits.begin(), logits.begin() + s * kVocab),
                        ReferenceDecoder(m, false, row0, 1, s)),
            1e-5);
}

TEST(TransformerDecoderTest, CreateChecksDims) {
  auto tok = std::make_unique<Embedding>(10, 8);
  auto r = TransformerDecoder::Create(std::move(tok), {}, std::make_unique<RMSNorm>(8),
                                      std::make_unique<Linear>(7, 10), 16);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("output in_dim (7)"));
  auto r2 = TransformerDecoder::Create(nullptr, {}, nullptr, nullptr, 16);
  EXPECT_FALSE(r2.ok());
}

}  // namespace
}  // namespace cctune
