// A whole-decoder gradient check that proves the op set is complete for training: a tiny
// one-layer Llama decoder (embedding -> RMSNorm -> q/k/v projections -> RoPE -> grouped-query
// attention -> output projection -> residual -> RMSNorm -> SwiGLU feed-forward -> residual ->
// final RMSNorm -> tied output projection -> cross-entropy with ignore_index) composed by hand
// from the kernels/ops.h forward and backward ops, with its parameter gradients accumulated
// into one contiguous gradient arena. Every parameter gradient is checked against central
// finite differences of the same network in fp64 (modules/reference.h layers), for GQA
// (4 query / 2 kv heads), MQA (4 / 1) and packed documents (a block-causal mask with
// per-sequence positions).
#include <cmath>
#include <string>
#include <vector>

#include "core/random.h"
#include "gtest/gtest.h"
#include "kernels/cpu/op_test_util.h"
#include "kernels/ops.h"
#include "modules/reference.h"

namespace cctune {
namespace {

using testing::ExpectGradClose;
using testing::NumericGradient;
using testing::Values;

struct Config {
  std::string name;
  int64_t v, d, n_h, n_kv, hd, f, b, s;
  ops::RopePairing pairing;
  bool packed;  // two documents per sequence: block-causal mask, positions restart
};

constexpr float kEps = 1e-5f;
constexpr double kRopeBase = 10000.0;

// The parameters in arena order.
struct Param {
  std::string name;
  Shape shape;
};

std::vector<Param> Params(const Config& c) {
  const int64_t q_dim = c.n_h * c.hd, kv_dim = c.n_kv * c.hd;
  return {{"tok_embeddings", {c.v, c.d}},  // tied with the output projection
          {"attn_norm", {c.d}},
          {"wq", {q_dim, c.d}},
          {"wk", {kv_dim, c.d}},
          {"wv", {kv_dim, c.d}},
          {"wo", {c.d, q_dim}},
          {"ffn_norm", {c.d}},
          {"w1", {c.f, c.d}},  // gate
          {"w3", {c.f, c.d}},  // up
          {"w2", {c.d, c.f}},  // down
          {"norm", {c.d}}};
}

// The data of one check: token ids, labels (some ignored), positions [b, s] and the mask
// [b, s, s] (1 = may attend).
using Batch = reference::TrainingBatch;

Batch MakeBatch(const Config& c, Generator& gen) {
  return reference::RandomTrainingBatch(c.b, c.s, c.v, c.packed, ops::kIgnoreIndex, gen);
}

// ---- The fp64 reference network (modules/reference.h) ----

using reference::Vec;

// The mean cross-entropy of the network with parameters theta (arena order).
double RefLoss(const Config& c, const Vec& theta, const Batch& bt) {
  std::vector<Vec> p;
  size_t off = 0;
  for (const Param& prm : Params(c)) {
    const size_t n = static_cast<size_t>(NumElements(prm.shape));
    p.emplace_back(theta.begin() + off, theta.begin() + off + n);
    off += n;
  }
  const Vec &emb = p[0], &attn_norm = p[1], &wq = p[2], &wk = p[3], &wv = p[4], &wo = p[5];
  const Vec &ffn_norm = p[6], &w1 = p[7], &w3 = p[8], &w2 = p[9], &norm = p[10];
  const int64_t m = c.b * c.s, d = c.d, hd = c.hd;
  Vec h(m * d);
  for (int64_t t = 0; t < m; ++t) {
    for (int64_t i = 0; i < d; ++i) h[t * d + i] = emb[bt.tokens[t] * d + i];
  }
  // Attention block.
  const Vec xn = reference::RmsNorm(h, m, d, attn_norm, kEps);
  const Vec inv_freq = reference::RopeInvFrequencies(hd, kRopeBase);
  const Vec q = reference::Rope(reference::Linear(xn, m, d, wq, c.n_h * hd), c.b, c.s, c.n_h,
                                hd, bt.positions, inv_freq, c.pairing);
  const Vec k = reference::Rope(reference::Linear(xn, m, d, wk, c.n_kv * hd), c.b, c.s, c.n_kv,
                                hd, bt.positions, inv_freq, c.pairing);
  const Vec v = reference::Linear(xn, m, d, wv, c.n_kv * hd);
  const std::vector<bool> mask(bt.mask.begin(), bt.mask.end());
  const Vec attn =
      reference::Attention(q, k, v, c.b, c.s, c.s, c.n_h, c.n_kv, hd, mask, /*causal=*/true);
  const Vec o = reference::Linear(attn, m, c.n_h * hd, wo, d);
  for (int64_t i = 0; i < m * d; ++i) h[i] += o[i];
  // Feed-forward block.
  const Vec xn2 = reference::RmsNorm(h, m, d, ffn_norm, kEps);
  const Vec act = reference::SiluMul(reference::Linear(xn2, m, d, w1, c.f),
                                     reference::Linear(xn2, m, d, w3, c.f));
  const Vec down = reference::Linear(act, m, c.f, w2, d);
  for (int64_t i = 0; i < m * d; ++i) h[i] += down[i];
  // Final norm, tied output projection, mean cross-entropy over the targets not ignored.
  const Vec logits = reference::Linear(reference::RmsNorm(h, m, d, norm, kEps), m, d, emb, c.v);
  return reference::CrossEntropy(logits, m, c.v, bt.labels, ops::kIgnoreIndex);
}

// ---- The same network from kernels/ops.h ----

Tensor Zeros(const Shape& s) { return ValueOrDie(Tensor::Zeros(s, DType::kF32)); }
Tensor Empty(const Shape& s) { return ValueOrDie(Tensor::Empty(s, DType::kF32)); }
Tensor View(const Tensor& t, const Shape& s) { return ValueOrDie(t.View(s)); }
// [b, s, n, hd] <-> [b, n, s, hd] (a view).
Tensor Tr12(const Tensor& t) { return ValueOrDie(t.Transpose(1, 2)); }

// Named views of one contiguous f32 arena, in Params() order.
std::vector<Tensor> ArenaViews(const Tensor& arena, const Config& c) {
  std::vector<Tensor> views;
  int64_t off = 0;
  for (const Param& p : Params(c)) {
    const int64_t n = NumElements(p.shape);
    views.push_back(View(ValueOrDie(arena.Narrow(0, off, n)), p.shape));
    off += n;
  }
  return views;
}

// Runs forward and backward; returns the mean loss and accumulates into the gradient arena.
double ForwardBackward(const Config& c, const std::vector<Tensor>& w, std::vector<Tensor>& gw,
                       const Batch& bt) {
  const Tensor &emb = w[0], &attn_norm = w[1], &wq = w[2], &wk = w[3], &wv = w[4], &wo = w[5];
  const Tensor &ffn_norm = w[6], &w1 = w[7], &w3 = w[8], &w2 = w[9], &norm = w[10];
  Tensor &g_emb = gw[0], &g_attn_norm = gw[1], &g_wq = gw[2], &g_wk = gw[3], &g_wv = gw[4];
  Tensor &g_wo = gw[5], &g_ffn_norm = gw[6], &g_w1 = gw[7], &g_w3 = gw[8], &g_w2 = gw[9];
  Tensor& g_norm = gw[10];
  const int64_t b = c.b, s = c.s, d = c.d, hd = c.hd, n = b * s;
  const int64_t q_dim = c.n_h * hd, kv_dim = c.n_kv * hd;
  const Tensor ids = ValueOrDie(Tensor::FromVector(bt.tokens, {b, s}));
  const Tensor targets = ValueOrDie(Tensor::FromVector(bt.labels, {n}));
  const Tensor positions = ValueOrDie(Tensor::FromVector(bt.positions, {b, s}));
  const Tensor mask = ValueOrDie(Tensor::FromVector(bt.mask, {b, s, s}, DType::kBool));
  const Tensor inv_freq = ValueOrDie(ops::RopeInvFrequencies(hd, kRopeBase));
  Tensor cos = Empty({s, hd / 2}), sin = Empty({s, hd / 2});
  CCTUNE_CHECK_OK(ops::RopeCache(cos, sin, inv_freq));
  ops::AttentionOptions opt;
  opt.causal = true;
  if (c.packed) opt.mask = &mask;

  // ---- Forward, keeping what the backward reads. ----
  Tensor h0 = Empty({b, s, d});
  CCTUNE_CHECK_OK(ops::Embedding(h0, emb, ids));
  Tensor xn1 = Empty({b, s, d});
  CCTUNE_CHECK_OK(ops::RmsNorm(xn1, h0, attn_norm, kEps));
  Tensor q = Empty({b, s, q_dim}), k = Empty({b, s, kv_dim}), v = Empty({b, s, kv_dim});
  CCTUNE_CHECK_OK(ops::Linear(q, xn1, wq));
  CCTUNE_CHECK_OK(ops::Linear(k, xn1, wk));
  CCTUNE_CHECK_OK(ops::Linear(v, xn1, wv));
  Tensor q4 = View(q, {b, s, c.n_h, hd}), k4 = View(k, {b, s, c.n_kv, hd});
  const Tensor v4 = View(v, {b, s, c.n_kv, hd});
  CCTUNE_CHECK_OK(ops::Rope(q4, q4, cos, sin, positions, c.pairing));  // in place
  CCTUNE_CHECK_OK(ops::Rope(k4, k4, cos, sin, positions, c.pairing));
  // Attention on [b, n, s, hd] views of the projections, no copies; out likewise.
  Tensor attn = Empty({b, s, q_dim});
  Tensor attn_t = Tr12(View(attn, {b, s, c.n_h, hd}));
  Tensor lse = Empty({b, c.n_h, s});
  CCTUNE_CHECK_OK(ops::AttentionWithLse(attn_t, lse, Tr12(q4), Tr12(k4), Tr12(v4), opt));
  Tensor o = Empty({b, s, d});
  CCTUNE_CHECK_OK(ops::Linear(o, attn, wo));
  Tensor h1 = Empty({b, s, d});
  CCTUNE_CHECK_OK(ops::Add(h1, h0, o));
  Tensor xn2 = Empty({b, s, d});
  CCTUNE_CHECK_OK(ops::RmsNorm(xn2, h1, ffn_norm, kEps));
  Tensor gate = Empty({b, s, c.f}), up = Empty({b, s, c.f}), act = Empty({b, s, c.f});
  CCTUNE_CHECK_OK(ops::Linear(gate, xn2, w1));
  CCTUNE_CHECK_OK(ops::Linear(up, xn2, w3));
  CCTUNE_CHECK_OK(ops::SiluMul(act, gate, up));
  Tensor down = Empty({b, s, d});
  CCTUNE_CHECK_OK(ops::Linear(down, act, w2));
  Tensor h2 = Empty({b, s, d});
  CCTUNE_CHECK_OK(ops::Add(h2, h1, down));
  Tensor xn3 = Empty({b, s, d});
  CCTUNE_CHECK_OK(ops::RmsNorm(xn3, h2, norm, kEps));
  Tensor logits = Empty({n, c.v});
  const Tensor xn3_rows = View(xn3, {n, d});
  CCTUNE_CHECK_OK(ops::Linear(logits, xn3_rows, emb));  // tied output projection
  Tensor loss_sum = Empty({}), num_valid = ValueOrDie(Tensor::Empty({}, DType::kI64));
  CCTUNE_CHECK_OK(ops::CrossEntropyForward(loss_sum, num_valid, nullptr, logits, targets));
  const double count = static_cast<double>(ValueOrDie(num_valid.ToInt64Vector())[0]);
  const double loss = Values(loss_sum)[0] / count;

  // ---- Backward. Activation gradients are zeroed buffers that collect contributions. ----
  Tensor& dlogits = logits;  // in place: the logits buffer becomes dlogits
  CCTUNE_CHECK_OK(ops::CrossEntropyBackward(dlogits, logits, targets, 1.0f / count));
  Tensor dxn3 = Zeros({n, d});
  CCTUNE_CHECK_OK(ops::LinearBackward(&dxn3, &g_emb, nullptr, dlogits, xn3_rows, emb));
  Tensor dh = Zeros({b, s, d});  // the residual stream's gradient: dh2, then dh1, then dh0
  CCTUNE_CHECK_OK(ops::RmsNormBackward(dh, &g_norm, View(dxn3, {b, s, d}), h2, norm, kEps));
  // h2 = h1 + down: both get dh (dh1 keeps collecting in dh).
  Tensor dact = Zeros({b, s, c.f});
  CCTUNE_CHECK_OK(ops::LinearBackward(&dact, &g_w2, nullptr, dh, act, w2));
  Tensor dgate = Zeros({b, s, c.f}), dup = Zeros({b, s, c.f});
  CCTUNE_CHECK_OK(ops::SiluMulBackward(dgate, dup, dact, gate, up));
  Tensor dxn2 = Zeros({b, s, d});
  CCTUNE_CHECK_OK(ops::LinearBackward(&dxn2, &g_w1, nullptr, dgate, xn2, w1));
  CCTUNE_CHECK_OK(ops::LinearBackward(&dxn2, &g_w3, nullptr, dup, xn2, w3));
  CCTUNE_CHECK_OK(ops::RmsNormBackward(dh, &g_ffn_norm, dxn2, h1, ffn_norm, kEps));
  // h1 = h0 + o.
  Tensor dattn = Zeros({b, s, q_dim});
  CCTUNE_CHECK_OK(ops::LinearBackward(&dattn, &g_wo, nullptr, dh, attn, wo));
  Tensor dq = Zeros({b, s, q_dim}), dk = Zeros({b, s, kv_dim}), dv = Zeros({b, s, kv_dim});
  Tensor dq4 = View(dq, {b, s, c.n_h, hd}), dk4 = View(dk, {b, s, c.n_kv, hd});
  Tensor dv4 = View(dv, {b, s, c.n_kv, hd});
  Tensor dq_t = Tr12(dq4), dk_t = Tr12(dk4), dv_t = Tr12(dv4);
  CCTUNE_CHECK_OK(ops::AttentionBackward(dq_t, dk_t, dv_t, Tr12(View(dattn, {b, s, c.n_h, hd})),
                                         Tr12(q4), Tr12(k4), Tr12(v4), &attn_t, &lse, opt));
  CCTUNE_CHECK_OK(ops::RopeBackward(dq4, dq4, cos, sin, positions, c.pairing));
  CCTUNE_CHECK_OK(ops::RopeBackward(dk4, dk4, cos, sin, positions, c.pairing));
  Tensor dxn1 = Zeros({b, s, d});
  CCTUNE_CHECK_OK(ops::LinearBackward(&dxn1, &g_wq, nullptr, dq, xn1, wq));
  CCTUNE_CHECK_OK(ops::LinearBackward(&dxn1, &g_wk, nullptr, dk, xn1, wk));
  CCTUNE_CHECK_OK(ops::LinearBackward(&dxn1, &g_wv, nullptr, dv, xn1, wv));
  CCTUNE_CHECK_OK(ops::RmsNormBackward(dh, &g_attn_norm, dxn1, h0, attn_norm, kEps));
  CCTUNE_CHECK_OK(ops::EmbeddingBackward(g_emb, dh, ids));  // adds to the output's gradient
  return loss;
}

class DecoderBackwardTest : public ::testing::TestWithParam<Config> {};

TEST_P(DecoderBackwardTest, EveryParameterGradientMatchesFiniteDifferences) {
  const Config& c = GetParam();
  Generator gen(801);
  int64_t total = 0;
  for (const Param& p : Params(c)) total += NumElements(p.shape);
  // Parameters: one f32 arena; embeddings N(0, 1), norms 1 + N(0, 0.1²), projections
  // N(0, 0.5²) so that attention is far from uniform.
  std::vector<float> init;
  for (const Param& p : Params(c)) {
    const bool is_norm = p.shape.size() == 1;
    const double std = p.name == "tok_embeddings" ? 1.0 : is_norm ? 0.1 : 0.5;
    for (int64_t i = 0; i < NumElements(p.shape); ++i) {
      init.push_back(static_cast<float>((is_norm ? 1.0 : 0.0) + std * gen.Normal()));
    }
  }
  const Tensor params = ValueOrDie(Tensor::FromVector(init, {total}));
  const std::vector<Tensor> w = ArenaViews(params, c);
  Tensor grads = Zeros({total});
  std::vector<Tensor> gw = ArenaViews(grads, c);
  const Batch bt = MakeBatch(c, gen);

  const double loss = ForwardBackward(c, w, gw, bt);
  const Vec theta = Values(params);
  EXPECT_NEAR(loss, RefLoss(c, theta, bt), 1e-5) << c.name;
  const Vec want = NumericGradient([&](const Vec& t) { return RefLoss(c, t, bt); }, theta, 1e-5);
  const Vec got = Values(grads);
  int64_t off = 0;
  for (const Param& p : Params(c)) {
    const int64_t n = NumElements(p.shape);
    const Vec g(got.begin() + off, got.begin() + off + n);
    const Vec r(want.begin() + off, want.begin() + off + n);
    double max_want = 0;
    for (double x : r) max_want = std::max(max_want, std::fabs(x));
    EXPECT_GT(max_want, 1e-4) << c.name << " " << p.name << " has no gradient to check";
    ExpectGradClose(g, r, 2e-5, c.name + " d" + p.name);
    off += n;
  }

  // A second step accumulates: the arena holds twice the gradient.
  ForwardBackward(c, w, gw, bt);
  Vec twice = got;
  for (double& x : twice) x *= 2;
  testing::ExpectClose(Values(grads), twice, {1e-6}, 1e-6, c.name + " accumulated twice");
}

INSTANTIATE_TEST_SUITE_P(
    Configs, DecoderBackwardTest,
    ::testing::Values(
        Config{"gqa_4_2", 11, 16, 4, 2, 4, 24, 2, 5, ops::RopePairing::kInterleaved, false},
        Config{"mqa_4_1", 11, 16, 4, 1, 4, 24, 2, 5, ops::RopePairing::kHalfSplit, false},
        Config{"gqa_packed", 13, 16, 4, 2, 4, 20, 2, 7, ops::RopePairing::kHalfSplit, true}),
    [](const ::testing::TestParamInfo<Config>& info) { return info.param.name; });

}  // namespace
}  // namespace cctune
