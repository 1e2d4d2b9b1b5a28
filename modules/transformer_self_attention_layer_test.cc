#include "modules/transformer_self_attention_layer.h"

#include <string>

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

constexpr int64_t kD = 16, kHeads = 4, kKvHeads = 2, kHeadDim = 4, kFfn = 24;
constexpr float kEps = 1e-5f;

std::unique_ptr<TransformerSelfAttentionLayer> MakeLayer(int64_t mlp_dim = kD) {
  MultiHeadAttentionArgs a;
  a.embed_dim = kD;
  a.num_heads = kHeads;
  a.num_kv_heads = kKvHeads;
  a.head_dim = kHeadDim;
  a.q_proj = std::make_unique<Linear>(kD, kHeads * kHeadDim);
  a.k_proj = std::make_unique<Linear>(kD, kKvHeads * kHeadDim);
  a.v_proj = std::make_unique<Linear>(kD, kKvHeads * kHeadDim);
  a.output_proj = std::make_unique<Linear>(kHeads * kHeadDim, kD);
  a.pos_embeddings = std::make_shared<RotaryPositionalEmbeddings>(kHeadDim, 64);
  a.max_seq_len = 64;
  auto attn = ValueOrDie(MultiHeadAttention::Create(std::move(a)));
  auto mlp = ValueOrDie(FeedForward::Create(std::make_unique<Linear>(mlp_dim, kFfn),
                                            std::make_unique<Linear>(kFfn, mlp_dim),
                                            std::make_unique<Linear>(mlp_dim, kFfn)));
  auto layer = TransformerSelfAttentionLayer::Create(std::move(attn), std::move(mlp),
                                                     std::make_unique<RMSNorm>(kD, kEps),
                                                     std::make_unique<RMSNorm>(kD, kEps));
  return layer.ok() ? std::move(layer).value() : nullptr;
}

TEST(TransformerSelfAttentionLayerTest, MatchesFp64Reference) {
  auto layer = MakeLayer();
  auto arena = ValueOrDie(ParameterArena::Create(*layer, DType::kF32, Device::Cpu()));
  Generator gen(3);
  for (auto& [name, t] : arena.named_tensors()) {
    Tensor v = t;
    const bool scale = name.find("norm") != std::string::npos;
    ASSERT_TRUE(FillNormal(v, scale ? 1.0 : 0.0, 0.3, gen).ok());
  }
  auto p = [&](const std::string& n) { return ToVec(ValueOrDie(arena.Get(n))); };
  const int64_t b = 2, s = 6, rows = b * s;
  Tensor x = ValueOrDie(RandomNormal({b, s, kD}, DType::kF32, gen));
  const Vec xv = ToVec(x);

  // h = x + attn(sa_norm(x)); out = h + mlp(mlp_norm(h)).
  const Vec n1 = reference::RmsNorm(xv, rows, kD, p("sa_norm.scale"), kEps);
  std::vector<int64_t> pos;
  for (int64_t i = 0; i < rows; ++i) pos.push_back(i % s);
  const Vec inv = reference::RopeInvFrequencies(kHeadDim, 10000.0);
  Vec q = reference::Linear(n1, rows, kD, p("attn.q_proj.weight"), kHeads * kHeadDim);
  Vec k = reference::Linear(n1, rows, kD, p("attn.k_proj.weight"), kKvHeads * kHeadDim);
  Vec v = reference::Linear(n1, rows, kD, p("attn.v_proj.weight"), kKvHeads * kHeadDim);
  q = reference::Rope(q, b, s, kHeads, kHeadDim, pos, inv, ops::RopePairing::kInterleaved);
  k = reference::Rope(k, b, s, kKvHeads, kHeadDim, pos, inv, ops::RopePairing::kInterleaved);
  const Vec att = reference::Linear(
      reference::Attention(q, k, v, b, s, s, kHeads, kKvHeads, kHeadDim, {}, true), rows,
      kHeads * kHeadDim, p("attn.output_proj.weight"), kD);
  Vec h(xv.size());
  for (size_t i = 0; i < h.size(); ++i) h[i] = xv[i] + att[i];
  const Vec n2 = reference::RmsNorm(h, rows, kD, p("mlp_norm.scale"), kEps);
  const Vec mlp = reference::Linear(
      reference::SiluMul(reference::Linear(n2, rows, kD, p("mlp.w1.weight"), kFfn),
                         reference::Linear(n2, rows, kD, p("mlp.w3.weight"), kFfn)),
      rows, kFfn, p("mlp.w2.weight"), kD);
  Vec want(h.size());
  for (size_t i = 0; i < h.size(); ++i) want[i] = h[i] + mlp[i];

  Tensor out = ValueOrDie(Tensor::Empty(x.shape(), DType::kF32));
  ASSERT_TRUE(layer->Forward(out, x).ok());
  EXPECT_LE(MaxRelError(ToVec(out), want), 1e-5);
  ASSERT_TRUE(layer->Forward(x, x).ok());  // in place, as the decoder runs it
  EXPECT_LE(MaxRelError(ToVec(x), want), 1e-5);
}

TEST(TransformerSelfAttentionLayerTest, NamesAndDimChecks) {
  auto layer = MakeLayer();
  std::vector<std::string> names;
  for (const auto& [n, p] : layer->NamedParameters()) names.push_back(n);
  EXPECT_THAT(names, ::testing::ElementsAre("attn.q_proj.weight", "attn.k_proj.weight",
                                            "attn.v_proj.weight", "attn.output_proj.weight",
                                            "mlp.w1.weight", "mlp.w2.weight", "mlp.w3.weight",
                                            "sa_norm.scale", "mlp_norm.scale"));
  EXPECT_EQ(MakeLayer(/*mlp_dim=*/12), nullptr);  // mlp width 12 vs embed_dim 16
  auto missing = TransformerSelfAttentionLayer::Create(nullptr, nullptr, nullptr, nullptr);
  EXPECT_FALSE(missing.ok());
  auto arena = ValueOrDie(ParameterArena::Create(*layer, DType::kF32, Device::Cpu()));
  Tensor wrong = ValueOrDie(Tensor::Zeros({1, 2, 15}, DType::kF32));
  EXPECT_THAT(std::string(layer->Forward(wrong, wrong).message()),
              ::testing::HasSubstr("[b, s, 16], got [1, 2, 15]"));
}

}  // namespace
}  // namespace cctune
