// DecoderTrainer on tiny random decoders (two layers; GQA 4/2 and MQA 4/1; tied and untied
// output; q/k/v biases; packed documents with an explicit mask and positions): the loss
// against an independent fp64 network built here from modules/reference.h, every parameter's
// gradient against central finite differences of that fp64 loss, activation checkpointing
// against the plain run (bit-identical), and gradient accumulation over micro-batches. LoRA:
// adapter gradients against the fp64 loss (merged, or with dropout applied unmerged with the
// documented Philox masks) and checkpointing with dropout (bit-identical).
#include "training/decoder_trainer.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/device_interface.h"
#include "core/random.h"
#include "gtest/gtest.h"
#include "kernels/cpu/gemm/gemm.h"
#include "kernels/ops.h"
#include "models/decoder_builder.h"
#include "models/lora.h"
#include "modules/activation_store.h"
#include "modules/lora_linear.h"
#include "modules/parameters.h"
#include "modules/reference.h"
#include "modules/transformer_decoder.h"
#include "tests/util/float_near.h"
#include "training/optim.h"

namespace cctune {
namespace {

struct Case {
  std::string name;
  DecoderConfig config;
  int64_t b, s;
  bool packed;  // two documents per row: block-causal mask, positions restart
};

DecoderConfig Tiny(int64_t v, int64_t n_h, int64_t n_kv, int64_t f, bool tied, bool bias,
                   ops::RopePairing pairing) {
  DecoderConfig c;
  c.vocab_size = v;
  c.num_layers = 2;
  c.num_heads = n_h;
  c.num_kv_heads = n_kv;
  c.embed_dim = 16;
  c.head_dim = 4;
  c.intermediate_dim = f;
  c.max_seq_len = 32;
  c.norm_eps = 1e-5f;
  c.rope_pairing = pairing;
  c.qkv_bias = bias;
  c.tie_word_embeddings = tied;
  return c;
}

std::vector<Case> Cases() {
  using P = ops::RopePairing;
  return {
      {"gqa_4_2_tied", Tiny(11, 4, 2, 24, true, false, P::kInterleaved), 2, 5, false},
      {"mqa_4_1_untied_bias", Tiny(13, 4, 1, 20, false, true, P::kHalfSplit), 2, 6, false},
      {"gqa_packed_untied", Tiny(13, 4, 2, 20, false, false, P::kInterleaved), 2, 7, true},
      {"mqa_packed_tied_bias", Tiny(9, 4, 1, 12, true, true, P::kHalfSplit), 1, 7, true},
  };
}

// A model with its f32 parameters and a zeroed f32 gradient arena of the same layout.
struct Model {
  std::unique_ptr<TransformerDecoder> decoder;
  ParameterArena params;
  ParameterArena grads;
};

// Embeddings N(0, 1), norms 1 + N(0, 0.1²), biases N(0, 0.1²), projections N(0, 0.5²) so
// that attention is far from uniform.
Model MakeModel(const DecoderConfig& config, uint64_t seed) {
  Model m;
  m.decoder = ValueOrDie(BuildDecoder(config));
  m.params = ValueOrDie(ParameterArena::Create(*m.decoder, DType::kF32, Device::Cpu()));
  Generator gen(seed);
  for (const auto& [name, view] : m.params.named_tensors()) {
    Tensor t = view;
    float* p = t.data<float>();
    const bool is_norm = name.find("norm") != std::string::npos;
    const bool is_bias = name.find("bias") != std::string::npos;
    const bool is_emb = name == "tok_embeddings.weight";
    const double std = is_emb ? 1.0 : (is_norm || is_bias) ? 0.1 : 0.5;
    for (int64_t i = 0; i < t.numel(); ++i) {
      p[i] = static_cast<float>((is_norm ? 1.0 : 0.0) + std * gen.Normal());
    }
  }
  m.grads = ValueOrDie(
      ParameterArena::Allocate(m.params.layout().WithDType(DType::kF32), Device::Cpu()));
  return m;
}

struct Data {
  std::vector<int64_t> tokens, labels, positions;  // [b, s]
  std::vector<float> mask;                         // [b, s, s]
  Tensor t_tokens, t_labels, t_positions, t_mask;
};

Data MakeData(const Case& c, Generator& gen) {
  Data d;
  reference::TrainingBatch t = reference::RandomTrainingBatch(
      c.b, c.s, c.config.vocab_size, c.packed, ops::kIgnoreIndex, gen);
  d.tokens = std::move(t.tokens);
  d.labels = std::move(t.labels);
  d.positions = std::move(t.positions);
  d.mask = std::move(t.mask);
  d.t_tokens = ValueOrDie(Tensor::FromVector(d.tokens, {c.b, c.s}));
  d.t_labels = ValueOrDie(Tensor::FromVector(d.labels, {c.b, c.s}));
  d.t_positions = ValueOrDie(Tensor::FromVector(d.positions, {c.b, c.s}));
  d.t_mask = ValueOrDie(Tensor::FromVector(d.mask, {c.b, c.s, c.s}, DType::kBool));
  return d;
}

// ---- The fp64 reference network ----

using reference::Vec;
using Params = std::map<std::string, Vec>;

Params ToDouble(const ParameterArena& arena) {
  Params p;
  for (const auto& [name, t] : arena.named_tensors()) {
    const std::vector<float> f = ValueOrDie(t.ToFloatVector());
    p[name] = Vec(f.begin(), f.end());
  }
  return p;
}

// The bias `name` of `p`, empty when the projection has none.
Vec Bias(const Params& p, const std::string& name) {
  auto it = p.find(name);
  return it == p.end() ? Vec() : it->second;
}

// LoRA dropout for RefLoss: the adapters are applied unmerged, each on its input with its own
// mask: element i of the [b·s, in] input of adapter `name` is dropped when the Uniform() number
// offsets[name] + i of stream `seed` is < p, and the rest are scaled by 1/(1-p) (in fp64).
struct RefDropout {
  float p = 0;
  uint64_t seed = 0;
  double scale = 0;  // alpha / rank
  std::map<std::string, uint64_t> offsets;
  uint64_t end = 0;  // the generator's offset after the step
};

// The masks' offsets as decoder_trainer.h documents them: consecutive blocks of b·s·in words
// from `offset`, in the order q, k, v, output_proj, w1, w2, w3 of each layer, then the output.
RefDropout MakeRefDropout(const Case& c, const Params& theta, float p, uint64_t seed,
                          uint64_t offset, double scale) {
  const DecoderConfig& cf = c.config;
  const int64_t m = c.b * c.s, d = cf.embed_dim, qd = cf.num_heads * cf.head_dim;
  RefDropout r{p, seed, scale, {}, offset};
  std::vector<std::pair<std::string, int64_t>> order;
  for (int64_t l = 0; l < cf.num_layers; ++l) {
    const std::string pre = absl::StrCat("layers.", l, ".");
    for (const auto& [name, in] : std::vector<std::pair<std::string, int64_t>>{
             {"attn.q_proj", d}, {"attn.k_proj", d}, {"attn.v_proj", d},
             {"attn.output_proj", qd}, {"mlp.w1", d}, {"mlp.w2", cf.intermediate_dim},
             {"mlp.w3", d}}) {
      order.push_back({pre + name, in});
    }
  }
  order.push_back({"output", d});
  for (const auto& [name, in] : order) {
    if (theta.count(name + ".lora_a.weight") == 0) continue;
    r.offsets[name] = r.end;
    r.end += static_cast<uint64_t>(m * in);
  }
  return r;
}

double RefLoss(const Case& c, const Params& p, const Data& data,
               const RefDropout* drop = nullptr) {
  const DecoderConfig& cf = c.config;
  const int64_t m = c.b * c.s, d = cf.embed_dim, hd = cf.head_dim, v = cf.vocab_size;
  const int64_t n_h = cf.num_heads, n_kv = cf.num_kv_heads;
  const int64_t f = cf.intermediate_dim;
  const double eps = cf.norm_eps;
  // Projection `name` of x [m, in]: base (+ bias), and with `drop` its adapter on dropout(x).
  auto proj = [&](const std::string& name, const Vec& x, int64_t in, int64_t out,
                  const Vec& w) {
    Vec y = reference::Linear(x, m, in, w, out, Bias(p, name + ".bias"));
    if (drop == nullptr || drop->offsets.count(name) == 0) return y;
    const Vec& a = p.at(name + ".lora_a.weight");
    const Vec& b = p.at(name + ".lora_b.weight");
    const int64_t r = static_cast<int64_t>(a.size()) / in;
    Generator gen(drop->seed);
    gen.SetState(drop->seed, drop->offsets.at(name));
    Vec xd(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      xd[i] = gen.Uniform() < drop->p ? 0.0 : x[i] / (1.0 - static_cast<double>(drop->p));
    }
    const Vec delta = reference::Linear(reference::Linear(xd, m, in, a, r), m, r, b, out);
    for (size_t i = 0; i < y.size(); ++i) y[i] += drop->scale * delta[i];
    return y;
  };
  const Vec inv_freq = reference::RopeInvFrequencies(hd, cf.rope_base);
  // Packed: the block-causal mask; otherwise causal.
  const std::vector<bool> mask =
      c.packed ? std::vector<bool>(data.mask.begin(), data.mask.end()) : std::vector<bool>();
  const Vec& emb = p.at("tok_embeddings.weight");
  Vec h(m * d);
  for (int64_t t = 0; t < m; ++t) {
    for (int64_t i = 0; i < d; ++i) h[t * d + i] = emb[data.tokens[t] * d + i];
  }
  for (int64_t l = 0; l < cf.num_layers; ++l) {
    const std::string pre = absl::StrCat("layers.", l, ".");
    auto P = [&](const std::string& n) -> const Vec& { return p.at(pre + n); };
    const Vec xn = reference::RmsNorm(h, m, d, P("sa_norm.scale"), eps);
    Vec q = proj(pre + "attn.q_proj", xn, d, n_h * hd, P("attn.q_proj.weight"));
    Vec k = proj(pre + "attn.k_proj", xn, d, n_kv * hd, P("attn.k_proj.weight"));
    const Vec vv = proj(pre + "attn.v_proj", xn, d, n_kv * hd, P("attn.v_proj.weight"));
    q = reference::Rope(q, c.b, c.s, n_h, hd, data.positions, inv_freq, cf.rope_pairing);
    k = reference::Rope(k, c.b, c.s, n_kv, hd, data.positions, inv_freq, cf.rope_pairing);
    const Vec attn = reference::Attention(q, k, vv, c.b, c.s, c.s, n_h, n_kv, hd, mask,
                                          /*causal=*/true);
    const Vec o = proj(pre + "attn.output_proj", attn, n_h * hd, d, P("attn.output_proj.weight"));
    for (int64_t i = 0; i < m * d; ++i) h[i] += o[i];
    const Vec xn2 = reference::RmsNorm(h, m, d, P("mlp_norm.scale"), eps);
    const Vec gate = proj(pre + "mlp.w1", xn2, d, f, P("mlp.w1.weight"));
    const Vec up = proj(pre + "mlp.w3", xn2, d, f, P("mlp.w3.weight"));
    const Vec down = proj(pre + "mlp.w2", reference::SiluMul(gate, up), f, d, P("mlp.w2.weight"));
    for (int64_t i = 0; i < m * d; ++i) h[i] += down[i];
  }
  const Vec& w_out = cf.tie_word_embeddings ? emb : p.at("output.weight");
  const Vec logits =
      proj("output", reference::RmsNorm(h, m, d, p.at("norm.scale"), eps), d, v, w_out);
  return reference::CrossEntropy(logits, m, v, data.labels, ops::kIgnoreIndex);
}

std::vector<float> Floats(const Tensor& t) { return ValueOrDie(t.ToFloatVector()); }

std::vector<float> AllGrads(const ParameterArena& grads) {
  std::vector<float> all;
  for (const auto& [name, t] : grads.named_tensors()) {
    const std::vector<float> f = Floats(t);
    all.insert(all.end(), f.begin(), f.end());
  }
  return all;
}

// torchtune's num_output_chunks: the output projection + cross-entropy runs in that many row
// chunks (torch.chunk's split), and the loss and gradients stay those of one chunk.
TEST(DecoderTrainerOutputChunksTest, NumOutputChunksSetsTheChunkingAndKeepsLossAndGradients) {
  const Case c = Cases()[1];  // b·s = 12 rows
  const int64_t n = c.b * c.s;
  Model m = MakeModel(c.config, 41);
  Generator gen(42);
  const Data data = MakeData(c, gen);
  struct Run {
    LossSum loss;
    std::vector<float> grads;
    int64_t chunks;
  };
  auto run = [&](int64_t num_output_chunks) {
    DecoderTrainerOptions opts;
    opts.num_output_chunks = num_output_chunks;
    auto trainer = ValueOrDie(DecoderTrainer::Create(m.decoder.get(), &m.grads, opts));
    EXPECT_EQ(trainer->last_num_output_chunks(), 0);
    EXPECT_TRUE(m.grads.Zero().ok());
    Run r;
    r.loss = ValueOrDie(trainer->ForwardBackward(data.t_tokens, data.t_labels));
    r.grads = AllGrads(m.grads);
    r.chunks = trainer->last_num_output_chunks();
    return r;
  };
  const Run one = run(1);
  EXPECT_EQ(one.chunks, 1);
  for (const auto& [k, want_chunks] :
       std::vector<std::pair<int64_t, int64_t>>{{3, 3}, {5, 4}, {12, 12}, {20, 12}}) {
    const Run r = run(k);
    // torch.chunk: ceil(12 / k) rows per chunk, so 5 chunks requested give 4 of 3 rows.
    EXPECT_EQ(r.chunks, want_chunks) << k;
    EXPECT_EQ(r.loss.num_valid, one.loss.num_valid);
    EXPECT_TRUE(::cctune::testing::FloatNear(r.loss.loss_sum, one.loss.loss_sum, 1e-6)) << k;
    ASSERT_EQ(r.grads.size(), one.grads.size());
    float max_g = 0;
    for (float g : one.grads) max_g = std::max(max_g, std::fabs(g));
    for (size_t i = 0; i < r.grads.size(); ++i) {
      ASSERT_TRUE(
          ::cctune::testing::FloatNear(r.grads[i], one.grads[i], 1e-5, 4, 1e-6 * max_g))
          << k << " grad[" << i << "]";
    }
  }
  // The default (0) follows logits_chunk_rows.
  DecoderTrainerOptions rows;
  rows.logits_chunk_rows = 5;
  auto by_rows = ValueOrDie(DecoderTrainer::Create(m.decoder.get(), &m.grads, rows));
  ASSERT_TRUE(by_rows->Loss(data.t_tokens, data.t_labels).ok());
  EXPECT_EQ(by_rows->last_num_output_chunks(), 3);  // 5 + 5 + 2 rows
  ASSERT_TRUE(by_rows->SetNumOutputChunks(2).ok());  // and the setter overrides it
  EXPECT_EQ(by_rows->options().logits_chunk_rows, 0);
  const LossSum two = ValueOrDie(by_rows->Loss(data.t_tokens, data.t_labels));
  EXPECT_EQ(by_rows->last_num_output_chunks(), 2);
  EXPECT_TRUE(::cctune::testing::FloatNear(two.loss_sum, one.loss.loss_sum, 1e-6));
  EXPECT_EQ(by_rows->SetNumOutputChunks(-1).code(), absl::StatusCode::kInvalidArgument);

  EXPECT_EQ(OutputChunkRows(DecoderTrainerOptions{}, n, 13), n);  // 16M logits fit
  EXPECT_EQ(OutputChunkRows(DecoderTrainerOptions{}, 1 << 20, 1 << 20), 16);
  DecoderTrainerOptions both;
  both.num_output_chunks = 2;
  both.logits_chunk_rows = 4;
  EXPECT_EQ(DecoderTrainer::Create(m.decoder.get(), &m.grads, both).status().code(),
            absl::StatusCode::kInvalidArgument);
}

class DecoderTrainerTest : public ::testing::TestWithParam<Case> {};

TEST_P(DecoderTrainerTest, GradientsMatchFiniteDifferencesOfFp64Reference) {
  const Case& c = GetParam();
  Model m = MakeModel(c.config, 11);
  Generator gen(12);
  const Data data = MakeData(c, gen);
  DecoderTrainerOptions opts;
  opts.logits_chunk_rows = 3;  // several chunks, the last one partial
  auto trainer = ValueOrDie(DecoderTrainer::Create(m.decoder.get(), &m.grads, opts));
  const Tensor* mask = c.packed ? &data.t_mask : nullptr;
  const Tensor* pos = c.packed ? &data.t_positions : nullptr;
  const LossSum loss = ValueOrDie(trainer->ForwardBackward(data.t_tokens, data.t_labels, mask, pos));
  EXPECT_EQ(loss.num_valid, c.b * c.s - 2);

  Params theta = ToDouble(m.params);
  EXPECT_NEAR(loss.Mean(), RefLoss(c, theta, data), 1e-5) << c.name;
  const LossSum fwd = ValueOrDie(trainer->Loss(data.t_tokens, data.t_labels, mask, pos));
  EXPECT_EQ(fwd.loss_sum, loss.loss_sum);
  // The same loss from the generation path's TransformerDecoder::Forward logits.
  {
    const Tensor logits = ValueOrDie((*m.decoder)(data.t_tokens, mask, pos));
    const Tensor rows = ValueOrDie(logits.View({c.b * c.s, c.config.vocab_size}));
    const Tensor targets = ValueOrDie(data.t_labels.View({c.b * c.s}));
    Tensor sum = ValueOrDie(Tensor::Empty({}, DType::kF32));
    Tensor count = ValueOrDie(Tensor::Empty({}, DType::kI64));
    ASSERT_TRUE(ops::CrossEntropyForward(sum, count, nullptr, rows, targets).ok());
    EXPECT_NEAR(ValueOrDie(sum.ToFloatVector())[0], loss.loss_sum, 1e-5 * loss.loss_sum)
        << c.name;
  }

  // A random sample of elements of every parameter, plus its largest-gradient element.
  Generator pick(13);
  const double h = 1e-5;
  int checked_tensors = 0;
  for (const auto& [name, gview] : m.grads.named_tensors()) {
    const std::vector<float> g = Floats(gview);
    double max_g = 0;
    int64_t arg_max = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      if (std::fabs(g[i]) > max_g) max_g = std::fabs(g[i]), arg_max = static_cast<int64_t>(i);
    }
    EXPECT_GT(max_g, 1e-4) << c.name << " " << name << " has no gradient to check";
    std::vector<int64_t> idx = {arg_max};
    for (int k = 0; k < 6; ++k) idx.push_back(static_cast<int64_t>(pick.UniformInt(g.size())));
    for (int64_t i : idx) {
      Vec& x = theta[name];
      const double x0 = x[i];
      x[i] = x0 + h;
      const double up = RefLoss(c, theta, data);
      x[i] = x0 - h;
      const double down = RefLoss(c, theta, data);
      x[i] = x0;
      const double want = (up - down) / (2 * h);
      EXPECT_NEAR(g[i], want, 5e-5 * (max_g + std::fabs(want)) + 1e-7)
          << c.name << " d" << name << "[" << i << "]";
    }
    ++checked_tensors;
  }
  EXPECT_EQ(checked_tensors, static_cast<int>(m.params.named_tensors().size()));
}

TEST_P(DecoderTrainerTest, CheckpointingGivesBitIdenticalGradientsAndAccumulates) {
  const Case& c = GetParam();
  Model m = MakeModel(c.config, 21);
  Generator gen(22);
  const Data data = MakeData(c, gen);
  const Tensor* mask = c.packed ? &data.t_mask : nullptr;
  const Tensor* pos = c.packed ? &data.t_positions : nullptr;
  auto plain = ValueOrDie(DecoderTrainer::Create(m.decoder.get(), &m.grads));
  const LossSum l1 = ValueOrDie(plain->ForwardBackward(data.t_tokens, data.t_labels, mask, pos));
  const std::vector<float> g1 = AllGrads(m.grads);

  ASSERT_TRUE(m.grads.Zero().ok());
  DecoderTrainerOptions opts;
  opts.activation_checkpointing = true;
  auto ckpt = ValueOrDie(DecoderTrainer::Create(m.decoder.get(), &m.grads, opts));
  const LossSum l2 = ValueOrDie(ckpt->ForwardBackward(data.t_tokens, data.t_labels, mask, pos));
  EXPECT_EQ(l1.loss_sum, l2.loss_sum);
  const std::vector<float> g2 = AllGrads(m.grads);
  ASSERT_EQ(g1.size(), g2.size());
  int64_t differ = 0;
  for (size_t i = 0; i < g1.size(); ++i) differ += g1[i] != g2[i];
  EXPECT_EQ(differ, 0) << c.name << ": checkpointed gradients differ";

  // A second call adds the same gradient again.
  ASSERT_TRUE(ckpt->ForwardBackward(data.t_tokens, data.t_labels, mask, pos).ok());
  // (Tied weights sum two contributions, so the rounding differs slightly from 2·g.)
  const std::vector<float> g3 = AllGrads(m.grads);
  double max_g = 0;
  for (float x : g1) max_g = std::max(max_g, static_cast<double>(std::fabs(x)));
  for (size_t i = 0; i < g1.size(); ++i) {
    ASSERT_NEAR(g3[i], 2.0 * g1[i], 1e-6 * max_g) << i;
  }
}

TEST_P(DecoderTrainerTest, TwoMicroBatchesEqualTheFullBatch) {
  Case c = GetParam();
  if (c.b < 2) GTEST_SKIP() << "needs b >= 2";
  Model m = MakeModel(c.config, 31);
  Generator gen(32);
  const Data data = MakeData(c, gen);
  auto trainer = ValueOrDie(DecoderTrainer::Create(m.decoder.get(), &m.grads));
  const Tensor* mask = c.packed ? &data.t_mask : nullptr;
  const Tensor* pos = c.packed ? &data.t_positions : nullptr;
  const LossSum full = ValueOrDie(trainer->ForwardBackward(data.t_tokens, data.t_labels, mask, pos));
  const std::vector<float> g_full = AllGrads(m.grads);
  ASSERT_TRUE(m.grads.Zero().ok());

  const int64_t total = ValueOrDie(CountValidLabels(data.t_labels));
  EXPECT_EQ(total, full.num_valid);
  LossSum sum;
  for (int64_t half = 0; half < 2; ++half) {
    const int64_t b0 = half == 0 ? 0 : c.b / 2, nb = half == 0 ? c.b / 2 : c.b - c.b / 2;
    const Tensor tokens = ValueOrDie(ValueOrDie(data.t_tokens.Narrow(0, b0, nb)).Contiguous());
    const Tensor labels = ValueOrDie(ValueOrDie(data.t_labels.Narrow(0, b0, nb)).Contiguous());
    Tensor mk, ps;
    if (c.packed) {
      mk = ValueOrDie(ValueOrDie(data.t_mask.Narrow(0, b0, nb)).Contiguous());
      ps = ValueOrDie(ValueOrDie(data.t_positions.Narrow(0, b0, nb)).Contiguous());
    }
    const LossSum part = ValueOrDie(trainer->ForwardBackward(
        tokens, labels, c.packed ? &mk : nullptr, c.packed ? &ps : nullptr, total));
    sum.loss_sum += part.loss_sum;
    sum.num_valid += part.num_valid;
  }
  EXPECT_EQ(sum.num_valid, full.num_valid);
  EXPECT_NEAR(sum.Mean(), full.Mean(), 1e-6 * full.Mean());
  const std::vector<float> g_acc = AllGrads(m.grads);
  double max_g = 0;
  for (float x : g_full) max_g = std::max(max_g, static_cast<double>(std::fabs(x)));
  for (size_t i = 0; i < g_full.size(); ++i) {
    ASSERT_NEAR(g_acc[i], g_full[i], 1e-6 * max_g + 1e-6 * std::fabs(g_full[i])) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Tiny, DecoderTrainerTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.name;
                         });

// bf16 weights: the activations and gradients stay f32, so the gradients equal those of an
// f32 model holding the same (bf16-rounded) weights. On a CPU whose bf16 dot product runs at
// twice the f32 rate (Zen 4/5: cpu::gemm_internal::Bf16DotRouteEnabled) the bf16 GEMMs round
// their f32 operands (dy; x in dW) to bf16 as PyTorch's bf16 training does: there the two runs
// agree to bf16's precision, a few units of 2^-8 (measured: loss 2.4e-3 relative, gradients
// 7.6e-3 of the largest), instead of f32's.
TEST(DecoderTrainerBf16Test, Bf16WeightsMatchF32ModelWithTheSameWeights) {
  const Case c = Cases()[1];  // untied, biases, MQA
  Model f = MakeModel(c.config, 51);
  Model b16;
  b16.decoder = ValueOrDie(BuildDecoder(c.config));
  b16.params = ValueOrDie(ParameterArena::Create(*b16.decoder, DType::kBF16, Device::Cpu()));
  ASSERT_TRUE(b16.params.LoadStateDict(f.params.ExportStateDict()).ok());
  b16.grads = ValueOrDie(
      ParameterArena::Allocate(b16.params.layout().WithDType(DType::kF32), Device::Cpu()));
  ASSERT_TRUE(f.params.LoadStateDict(b16.params.ExportStateDict()).ok());  // round f's weights
  Generator gen(52);
  const Data data = MakeData(c, gen);
  auto tf = ValueOrDie(DecoderTrainer::Create(f.decoder.get(), &f.grads));
  auto tb = ValueOrDie(DecoderTrainer::Create(b16.decoder.get(), &b16.grads));
  const LossSum lf = ValueOrDie(tf->ForwardBackward(data.t_tokens, data.t_labels));
  const LossSum lb = ValueOrDie(tb->ForwardBackward(data.t_tokens, data.t_labels));
  const bool bf16_dot = cpu::gemm_internal::Bf16DotRouteEnabled();
  const double loss_tol = bf16_dot ? 4.0 / 256 * std::fabs(lf.Mean()) : 1e-5;
  // (measured, Zen 5: up to 8.7/256 of a tensor's largest gradient, on layers.0 q_proj)
  const double grad_rel = bf16_dot ? 16.0 / 256 : 1e-5;
  EXPECT_NEAR(lb.Mean(), lf.Mean(), loss_tol);
  for (const auto& [name, gview] : f.grads.named_tensors()) {
    const std::vector<float> gf = Floats(gview);
    const std::vector<float> gb = Floats(ValueOrDie(b16.grads.Get(name)));
    double max_g = 0;
    for (float x : gf) max_g = std::max(max_g, static_cast<double>(std::fabs(x)));
    EXPECT_GT(max_g, 0) << name;
    for (size_t i = 0; i < gf.size(); ++i) {
      ASSERT_NEAR(gb[i], gf[i], grad_rel * max_g) << name << "[" << i << "]";
    }
  }
}

// A gradient arena holding only some parameters (the rest frozen): those gradients equal the
// full run's, for a tied and an untied model.
TEST(DecoderTrainerFrozenTest, SubsetArenaGetsTheSameGradients) {
  for (const Case& c : {Cases()[0], Cases()[1]}) {
    Model m = MakeModel(c.config, 61);
    Generator gen(62);
    const Data data = MakeData(c, gen);
    auto full = ValueOrDie(DecoderTrainer::Create(m.decoder.get(), &m.grads));
    ASSERT_TRUE(full->ForwardBackward(data.t_tokens, data.t_labels).ok());
    std::vector<ParameterSpec> specs;
    for (const auto& e : m.grads.layout().entries()) {
      const std::string& n = e.spec.name;
      if (n.rfind("layers.0.attn.", 0) == 0 || n.rfind("layers.1.mlp.w3", 0) == 0) {
        specs.push_back(e.spec);
      }
    }
    ASSERT_GE(specs.size(), 5u);
    ParameterArena subset = ValueOrDie(ParameterArena::Allocate(
        ValueOrDie(ParameterLayout::Create(specs)), Device::Cpu()));
    EXPECT_FALSE(DecoderTrainer::Create(m.decoder.get(), &subset).ok());
    DecoderTrainerOptions opts;
    opts.frozen_if_missing = true;
    auto part = ValueOrDie(DecoderTrainer::Create(m.decoder.get(), &subset, opts));
    ASSERT_TRUE(part->ForwardBackward(data.t_tokens, data.t_labels).ok());
    for (const auto& [name, g] : subset.named_tensors()) {
      const std::vector<float> want = Floats(ValueOrDie(m.grads.Get(name)));
      const std::vector<float> got = Floats(g);
      double max_g = 0;
      for (float x : want) max_g = std::max(max_g, static_cast<double>(std::fabs(x)));
      EXPECT_GT(max_g, 0) << name;
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_NEAR(got[i], want[i], 1e-6 * max_g) << c.name << " " << name << "[" << i << "]";
      }
    }
  }
}

TEST(DecoderTrainerErrorsTest, RejectsBadInputs) {
  const Case c = Cases()[0];
  Model m = MakeModel(c.config, 41);
  auto trainer = ValueOrDie(DecoderTrainer::Create(m.decoder.get(), &m.grads));
  const Tensor tokens = ValueOrDie(Tensor::FromVector(std::vector<int64_t>{1, 2, 3}, {1, 3}));
  const Tensor labels_bad = ValueOrDie(Tensor::FromVector(std::vector<int64_t>{1, 2}, {1, 2}));
  absl::Status st = trainer->ForwardBackward(tokens, labels_bad).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("labels"), std::string::npos) << st;
  const Tensor mask_bad = ValueOrDie(Tensor::Zeros({1, 3, 2}, DType::kBool));
  const Tensor labels = ValueOrDie(Tensor::FromVector(std::vector<int64_t>{2, 3, -100}, {1, 3}));
  st = trainer->ForwardBackward(tokens, labels, &mask_bad).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("mask"), std::string::npos) << st;

  // A gradient arena of another layout is refused, naming the parameter.
  const Case other = Cases()[1];
  Model m2 = MakeModel(other.config, 42);
  st = DecoderTrainer::Create(m.decoder.get(), &m2.grads).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);

  // All labels ignored: loss 0 over 0 tokens, no gradient.
  const Tensor none = ValueOrDie(Tensor::FromVector(std::vector<int64_t>{-100, -100, -100}, {1, 3}));
  const LossSum l = ValueOrDie(trainer->ForwardBackward(tokens, none));
  EXPECT_EQ(l.num_valid, 0);
  for (float g : AllGrads(m.grads)) ASSERT_EQ(g, 0.f);
}

// ---- LoRA ----

// A tiny untied LoRA model (adapters on q, k, v, output_proj, the MLP and the output; rank 3,
// alpha 6 so scale 2), random base and adapters (lora_b non-zero, as after some training),
// with a gradient arena holding the adapters only.
struct LoRAModel {
  std::unique_ptr<TransformerDecoder> decoder;
  ParameterArena params;
  ParameterArena grads;
};

LoRAOptions TinyLoRA(bool all) {
  LoRAOptions o;
  o.lora_attn_modules = all ? std::vector<std::string>{"q_proj", "k_proj", "v_proj", "output_proj"}
                            : std::vector<std::string>{"v_proj"};
  o.apply_lora_to_mlp = all;
  o.apply_lora_to_output = all;
  o.lora_rank = 3;
  o.lora_alpha = 6.0;
  return o;
}

LoRAModel MakeLoRAModel(const DecoderConfig& config, const LoRAOptions& lora, uint64_t seed) {
  LoRAModel m;
  m.decoder = ValueOrDie(BuildLoRADecoder(config, lora));
  m.params = ValueOrDie(ParameterArena::Create(*m.decoder, DType::kF32, Device::Cpu()));
  Generator gen(seed);
  for (const auto& [name, view] : m.params.named_tensors()) {
    Tensor t = view;
    float* p = t.data<float>();
    const bool is_norm = name.find("norm") != std::string::npos;
    const bool is_bias = name.find("bias") != std::string::npos;
    const bool is_emb = name == "tok_embeddings.weight";
    const bool is_lora = IsLoRAParameter(name);
    const double std = is_emb ? 1.0 : (is_norm || is_bias) ? 0.1 : is_lora ? 0.2 : 0.5;
    for (int64_t i = 0; i < t.numel(); ++i) {
      p[i] = static_cast<float>((is_norm ? 1.0 : 0.0) + std * gen.Normal());
    }
  }
  m.grads = ValueOrDie(
      ParameterArena::Allocate(ValueOrDie(LoRATrainableLayout(*m.decoder)), Device::Cpu()));
  return m;
}

// The merged parameters W + scale · B·A in fp64 (adapter entries are left in; RefLoss ignores
// them), so RefLoss computes the LoRA model's loss.
Params MergeRef(const Params& theta, double scale) {
  Params merged = theta;
  const std::string a_suffix = ".lora_a.weight";
  for (const auto& [name, a] : theta) {
    if (name.size() < a_suffix.size() ||
        name.compare(name.size() - a_suffix.size(), a_suffix.size(), a_suffix) != 0) {
      continue;
    }
    const std::string base = name.substr(0, name.size() - a_suffix.size());
    const Vec& b = theta.at(base + ".lora_b.weight");
    Vec& w = merged.at(base + ".weight");
    const int64_t r = 3;
    const int64_t in = static_cast<int64_t>(a.size()) / r;
    const int64_t out = static_cast<int64_t>(b.size()) / r;
    EXPECT_EQ(static_cast<int64_t>(w.size()), in * out) << base;
    for (int64_t o = 0; o < out; ++o) {
      for (int64_t i = 0; i < in; ++i) {
        double acc = 0;
        for (int64_t k = 0; k < r; ++k) acc += b[o * r + k] * a[k * in + i];
        w[o * in + i] += scale * acc;
      }
    }
  }
  return merged;
}

TEST(DecoderTrainerLoRATest, AdapterGradientsMatchFiniteDifferencesOfFp64Reference) {
  for (const Case& c : {Cases()[1], Cases()[2]}) {  // untied MQA with biases; packed GQA
    LoRAModel m = MakeLoRAModel(c.config, TinyLoRA(true), 71);
    // Only adapters are trainable: 2 layers x 7 projections + output, two tensors each.
    EXPECT_EQ(m.grads.named_tensors().size(), 2u * (2 * 7 + 1));
    EXPECT_EQ(m.grads.NumParameters(), NumLoRAParameters(*m.decoder));
    for (const auto& [name, t] : m.grads.named_tensors()) EXPECT_TRUE(IsLoRAParameter(name));
    EXPECT_FALSE(DecoderTrainer::Create(m.decoder.get(), &m.grads).ok());
    Generator gen(72);
    const Data data = MakeData(c, gen);
    DecoderTrainerOptions opts;
    opts.frozen_if_missing = true;
    opts.logits_chunk_rows = 4;
    auto trainer = ValueOrDie(DecoderTrainer::Create(m.decoder.get(), &m.grads, opts));
    const Tensor* mask = c.packed ? &data.t_mask : nullptr;
    const Tensor* pos = c.packed ? &data.t_positions : nullptr;
    const LossSum loss =
        ValueOrDie(trainer->ForwardBackward(data.t_tokens, data.t_labels, mask, pos));
    Params theta = ToDouble(m.params);
    EXPECT_NEAR(loss.Mean(), RefLoss(c, MergeRef(theta, 2.0), data), 1e-5) << c.name;
    // The generation path (LoRALinear::Forward) gives the same loss.
    {
      const Tensor logits = ValueOrDie((*m.decoder)(data.t_tokens, mask, pos));
      const Tensor rows = ValueOrDie(logits.View({c.b * c.s, c.config.vocab_size}));
      const Tensor targets = ValueOrDie(data.t_labels.View({c.b * c.s}));
      Tensor sum = ValueOrDie(Tensor::Empty({}, DType::kF32));
      Tensor count = ValueOrDie(Tensor::Empty({}, DType::kI64));
      ASSERT_TRUE(ops::CrossEntropyForward(sum, count, nullptr, rows, targets).ok());
      EXPECT_NEAR(ValueOrDie(sum.ToFloatVector())[0], loss.loss_sum, 1e-5 * loss.loss_sum);
    }
    Generator pick(73);
    const double h = 1e-5;
    for (const auto& [name, gview] : m.grads.named_tensors()) {
      const std::vector<float> g = Floats(gview);
      double max_g = 0;
      int64_t arg_max = 0;
      for (size_t i = 0; i < g.size(); ++i) {
        if (std::fabs(g[i]) > max_g) max_g = std::fabs(g[i]), arg_max = static_cast<int64_t>(i);
      }
      EXPECT_GT(max_g, 1e-5) << c.name << " " << name << " has no gradient to check";
      std::vector<int64_t> idx = {arg_max};
      for (int k = 0; k < 4; ++k) idx.push_back(static_cast<int64_t>(pick.UniformInt(g.size())));
      for (int64_t i : idx) {
        Vec& x = theta[name];
        const double x0 = x[i];
        x[i] = x0 + h;
        const double up = RefLoss(c, MergeRef(theta, 2.0), data);
        x[i] = x0 - h;
        const double down = RefLoss(c, MergeRef(theta, 2.0), data);
        x[i] = x0;
        const double want = (up - down) / (2 * h);
        EXPECT_NEAR(g[i], want, 5e-5 * (max_g + std::fabs(want)) + 1e-7)
            << c.name << " d" << name << "[" << i << "]";
      }
    }
  }
}

// One AdamW step over the adapters (LoRAParamBuffers: one ParamBuffer per adapter tensor)
// changes every adapter and no base weight.
TEST(DecoderTrainerLoRATest, AdamWStepChangesOnlyAdapters) {
  const Case c = Cases()[0];  // tied: the embedding is also the output projection
  LoRAModel m = MakeLoRAModel(c.config, TinyLoRA(false), 81);
  const Params before = ToDouble(m.params);
  Generator gen(82);
  const Data data = MakeData(c, gen);
  DecoderTrainerOptions opts;
  opts.frozen_if_missing = true;
  auto trainer = ValueOrDie(DecoderTrainer::Create(m.decoder.get(), &m.grads, opts));
  ASSERT_TRUE(trainer->ForwardBackward(data.t_tokens, data.t_labels).ok());
  {  // activation checkpointing recomputes LoRA layers to the same bits
    ParameterArena again = ValueOrDie(ParameterArena::Allocate(m.grads.layout(), Device::Cpu()));
    DecoderTrainerOptions ck = opts;
    ck.activation_checkpointing = true;
    auto t2 = ValueOrDie(DecoderTrainer::Create(m.decoder.get(), &again, ck));
    ASSERT_TRUE(t2->ForwardBackward(data.t_tokens, data.t_labels).ok());
    EXPECT_EQ(AllGrads(again), AllGrads(m.grads));
  }
  std::vector<ParamBuffer> buffers = ValueOrDie(LoRAParamBuffers(m.params, m.grads));
  ASSERT_EQ(buffers.size(), 4u);  // v_proj lora_a/lora_b in two layers
  AdamWOptions ao;
  ao.lr = 1e-2;
  auto opt = ValueOrDie(AdamW::Create(buffers, ao));
  ASSERT_TRUE(opt->Step().ok());
  const Params after = ToDouble(m.params);
  int changed = 0;
  for (const auto& [name, v] : before) {
    if (IsLoRAParameter(name)) {
      EXPECT_NE(after.at(name), v) << name;
      ++changed;
    } else {
      EXPECT_EQ(after.at(name), v) << name << " is frozen but changed";
    }
  }
  EXPECT_EQ(changed, 4);
}

// Merging the adapters into the base weights (LoRALinear::Merge) gives the logits of the
// unmerged model, and a plain model loading BaseStateDict of the merged weights gives them too.
TEST(DecoderTrainerLoRATest, MergedAndUnmergedGiveTheSameLogits) {
  for (const Case& c : {Cases()[0], Cases()[1]}) {
    const bool untied = !c.config.tie_word_embeddings;
    LoRAModel m = MakeLoRAModel(c.config, TinyLoRA(untied), 91);
    Generator gen(92);
    const Data data = MakeData(c, gen);
    const std::vector<float> unmerged = Floats(ValueOrDie((*m.decoder)(data.t_tokens)));
    ASSERT_TRUE(MergeLoRA(*m.decoder).ok());
    const std::vector<float> merged = Floats(ValueOrDie((*m.decoder)(data.t_tokens)));
    auto plain = ValueOrDie(BuildDecoder(c.config));
    auto arena = ValueOrDie(ParameterArena::Create(*plain, DType::kF32, Device::Cpu()));
    ASSERT_TRUE(arena.LoadStateDict(BaseStateDict(m.params.ExportStateDict())).ok());
    const std::vector<float> from_plain = Floats(ValueOrDie((*plain)(data.t_tokens)));
    ASSERT_EQ(merged.size(), unmerged.size());
    double max_diff = 0, max_abs = 0;
    for (size_t i = 0; i < merged.size(); ++i) {
      max_diff = std::max(max_diff, static_cast<double>(std::fabs(merged[i] - unmerged[i])));
      max_abs = std::max(max_abs, static_cast<double>(std::fabs(unmerged[i])));
      ASSERT_EQ(merged[i], from_plain[i]) << i;
    }
    EXPECT_LE(max_diff, 1e-5 * std::max(1.0, max_abs)) << c.name;
    EXPECT_GT(max_abs, 0.1);
  }
}

// LoRA dropout: with the generator at a fixed state, the trainer's loss is the fp64 reference
// loss with the documented masks (each adapter's own block of Philox words, its input dropped
// elementwise, the base path undropped), and every adapter gradient matches central finite
// differences of that loss with the same masks. The generator advances past exactly those
// blocks; Loss() applies no dropout and draws nothing.
TEST(DecoderTrainerLoRADropoutTest, AdapterGradientsMatchFiniteDifferencesWithTheSameMasks) {
  const float p = 0.25f;
  for (const Case& c : {Cases()[1], Cases()[2]}) {  // untied MQA with biases; packed GQA
    LoRAOptions lora = TinyLoRA(true);
    lora.lora_dropout = p;
    LoRAModel m = MakeLoRAModel(c.config, lora, 171);
    Generator gen(172);
    const Data data = MakeData(c, gen);
    DecoderTrainerOptions opts;
    opts.frozen_if_missing = true;
    opts.logits_chunk_rows = 4;  // the output adapter's mask is cut into row chunks
    auto trainer = ValueOrDie(DecoderTrainer::Create(m.decoder.get(), &m.grads, opts));
    const uint64_t seed = (uint64_t{1} << 33) + 9, offset = 1001;
    Generator drop_gen(seed);
    drop_gen.SetState(seed, offset);
    trainer->set_generator(&drop_gen);
    const Tensor* mask = c.packed ? &data.t_mask : nullptr;
    const Tensor* pos = c.packed ? &data.t_positions : nullptr;
    Params theta = ToDouble(m.params);
    const RefDropout drop = MakeRefDropout(c, theta, p, seed, offset, 2.0);
    ASSERT_EQ(drop.offsets.size(), 2u * 7 + 1);

    // Validation first: no dropout, nothing drawn.
    const LossSum eval = ValueOrDie(trainer->Loss(data.t_tokens, data.t_labels, mask, pos));
    EXPECT_EQ(drop_gen.offset(), offset);
    const double eval_ref = RefLoss(c, MergeRef(theta, 2.0), data);
    EXPECT_NEAR(eval.Mean(), eval_ref, 1e-5) << c.name;

    const LossSum loss =
        ValueOrDie(trainer->ForwardBackward(data.t_tokens, data.t_labels, mask, pos));
    EXPECT_EQ(drop_gen.seed(), seed);
    EXPECT_EQ(drop_gen.offset(), drop.end) << "the generator must advance past every mask";
    const double want = RefLoss(c, theta, data, &drop);
    EXPECT_NEAR(loss.Mean(), want, 1e-5) << c.name;
    EXPECT_GT(std::fabs(want - eval_ref), 1e-3) << c.name << ": dropout changed nothing";

    Generator pick(173);
    const double h = 1e-5;
    for (const auto& [name, gview] : m.grads.named_tensors()) {
      const std::vector<float> g = Floats(gview);
      double max_g = 0;
      int64_t arg_max = 0;
      for (size_t i = 0; i < g.size(); ++i) {
        if (std::fabs(g[i]) > max_g) max_g = std::fabs(g[i]), arg_max = static_cast<int64_t>(i);
      }
      EXPECT_GT(max_g, 1e-5) << c.name << " " << name << " has no gradient to check";
      std::vector<int64_t> idx = {arg_max};
      for (int k = 0; k < 4; ++k) idx.push_back(static_cast<int64_t>(pick.UniformInt(g.size())));
      for (int64_t i : idx) {
        Vec& x = theta[name];
        const double x0 = x[i];
        x[i] = x0 + h;
        const double up = RefLoss(c, theta, data, &drop);
        x[i] = x0 - h;
        const double down = RefLoss(c, theta, data, &drop);
        x[i] = x0;
        const double fd = (up - down) / (2 * h);
        EXPECT_NEAR(g[i], fd, 5e-5 * (max_g + std::fabs(fd)) + 1e-7)
            << c.name << " d" << name << "[" << i << "]";
      }
    }
  }
}

// With dropout, activation checkpointing recomputes the same masks: bit-identical losses and
// gradients, and both runs leave the generator in the same state. A generator restored to the
// same state reproduces a step exactly; the next step draws fresh masks; without dropout the
// gradients differ (so the masks are really applied).
TEST(DecoderTrainerLoRADropoutTest, CheckpointingAndRestoredGeneratorGiveBitIdenticalGradients) {
  for (const Case& c : {Cases()[1], Cases()[2]}) {
    LoRAOptions lora = TinyLoRA(true);
    lora.lora_dropout = 0.1;
    LoRAModel m = MakeLoRAModel(c.config, lora, 181);
    Generator gen(182);
    const Data data = MakeData(c, gen);
    const Tensor* mask = c.packed ? &data.t_mask : nullptr;
    const Tensor* pos = c.packed ? &data.t_positions : nullptr;
    DecoderTrainerOptions opts;
    opts.frozen_if_missing = true;
    opts.logits_chunk_rows = 5;
    auto run = [&](bool ckpt, uint64_t offset, std::vector<float>* grads, uint64_t* end) {
      ParameterArena g = ValueOrDie(ParameterArena::Allocate(m.grads.layout(), Device::Cpu()));
      DecoderTrainerOptions o = opts;
      o.activation_checkpointing = ckpt;
      auto t = ValueOrDie(DecoderTrainer::Create(m.decoder.get(), &g, o));
      Generator drop_gen(5);
      drop_gen.SetState(5, offset);
      t->set_generator(&drop_gen);
      const LossSum l = ValueOrDie(t->ForwardBackward(data.t_tokens, data.t_labels, mask, pos));
      *grads = AllGrads(g);
      *end = drop_gen.offset();
      return l.loss_sum;
    };
    std::vector<float> g_plain, g_ckpt, g_again, g_next;
    uint64_t end_plain = 0, end_ckpt = 0, end_again = 0, end_next = 0;
    const double l_plain = run(false, 40, &g_plain, &end_plain);
    const double l_ckpt = run(true, 40, &g_ckpt, &end_ckpt);
    EXPECT_EQ(l_plain, l_ckpt) << c.name;
    EXPECT_EQ(end_plain, end_ckpt) << c.name;
    ASSERT_EQ(g_plain.size(), g_ckpt.size());
    int64_t differ = 0;
    for (size_t i = 0; i < g_plain.size(); ++i) differ += g_plain[i] != g_ckpt[i];
    EXPECT_EQ(differ, 0) << c.name << ": checkpointed gradients differ with dropout";
    const double l_again = run(false, 40, &g_again, &end_again);
    EXPECT_EQ(l_again, l_plain) << c.name;
    EXPECT_EQ(g_again, g_plain) << c.name;
    // The next step (the generator where this one left it) draws other masks.
    const double l_next = run(false, end_plain, &g_next, &end_next);
    EXPECT_NE(l_next, l_plain) << c.name;
    EXPECT_EQ(end_next - end_plain, end_plain - 40) << c.name;
    // Dropout 0: no draws and other gradients.
    LoRAOptions no_drop = TinyLoRA(true);
    LoRAModel m0 = MakeLoRAModel(c.config, no_drop, 181);  // the same weights
    auto t0 = ValueOrDie(DecoderTrainer::Create(m0.decoder.get(), &m0.grads, opts));
    Generator g0(5);
    t0->set_generator(&g0);
    ASSERT_TRUE(t0->ForwardBackward(data.t_tokens, data.t_labels, mask, pos).ok());
    EXPECT_EQ(g0.offset(), 0u);
    EXPECT_NE(AllGrads(m0.grads), g_plain) << c.name;
  }
}

// Packing two documents into one row (block-causal mask, positions restarting at 0) gives each
// document exactly the loss it has alone, and the packed gradients equal the sum of the
// per-document gradients. (RoPE sees only relative positions, so it is the block-causal mask
// that keeps the documents apart: a plain causal mask fails this test.)
TEST(DecoderTrainerPackingTest, PackedEqualsUnpackedPerDocument) {
  const DecoderConfig config = Tiny(13, 4, 2, 20, /*tied=*/false, /*bias=*/false,
                                    ops::RopePairing::kInterleaved);
  Model m = MakeModel(config, 101);
  auto trainer = ValueOrDie(DecoderTrainer::Create(m.decoder.get(), &m.grads));
  Generator gen(102);
  const int64_t len[2] = {5, 8};
  const int64_t s = len[0] + len[1];
  std::vector<int64_t> tokens(s), labels(s), positions(s);
  for (int64_t i = 0; i < s; ++i) {
    tokens[i] = static_cast<int64_t>(gen.UniformInt(config.vocab_size));
    labels[i] = static_cast<int64_t>(gen.UniformInt(config.vocab_size));
    positions[i] = i < len[0] ? i : i - len[0];
  }
  labels[0] = ops::kIgnoreIndex;
  labels[len[0]] = ops::kIgnoreIndex;
  std::vector<float> mask(s * s, 0.f);  // block-causal
  for (int64_t i = 0; i < s; ++i) {
    const int64_t start = i < len[0] ? 0 : len[0];
    for (int64_t j = start; j <= i; ++j) mask[i * s + j] = 1.f;
  }
  const Tensor t_tokens = ValueOrDie(Tensor::FromVector(tokens, {1, s}));
  const Tensor t_labels = ValueOrDie(Tensor::FromVector(labels, {1, s}));
  const Tensor t_pos = ValueOrDie(Tensor::FromVector(positions, {1, s}));
  const Tensor t_mask = ValueOrDie(Tensor::FromVector(mask, {1, s, s}, DType::kBool));

  auto grads_vector = [&]() {
    std::vector<float> g;
    for (const auto& [name, view] : m.grads.named_tensors()) {
      const std::vector<float> v = ValueOrDie(view.ToFloatVector());
      g.insert(g.end(), v.begin(), v.end());
    }
    return g;
  };
  auto zero_grads = [&]() {
    for (const auto& [name, view] : m.grads.named_tensors()) {
      Tensor t = view;
      std::fill(t.data<float>(), t.data<float>() + t.numel(), 0.f);
    }
  };

  zero_grads();
  const LossSum packed = ValueOrDie(trainer->ForwardBackward(t_tokens, t_labels, &t_mask, &t_pos,
                                                             /*normalizer=*/1.0));
  const std::vector<float> g_packed = grads_vector();

  zero_grads();
  double sum = 0;
  int64_t valid = 0;
  int64_t offset = 0;
  for (int d = 0; d < 2; ++d) {
    std::vector<int64_t> tok(tokens.begin() + offset, tokens.begin() + offset + len[d]);
    std::vector<int64_t> lab(labels.begin() + offset, labels.begin() + offset + len[d]);
    const Tensor dt = ValueOrDie(Tensor::FromVector(tok, {1, len[d]}));
    const Tensor dl = ValueOrDie(Tensor::FromVector(lab, {1, len[d]}));
    const LossSum alone = ValueOrDie(trainer->ForwardBackward(dt, dl, nullptr, nullptr, 1.0));
    // The same document inside the pack, with the other document's labels ignored.
    std::vector<int64_t> only = labels;
    for (int64_t i = 0; i < s; ++i) {
      if (i < offset || i >= offset + len[d]) only[i] = ops::kIgnoreIndex;
    }
    const Tensor t_only = ValueOrDie(Tensor::FromVector(only, {1, s}));
    const LossSum in_pack = ValueOrDie(trainer->Loss(t_tokens, t_only, &t_mask, &t_pos));
    EXPECT_EQ(in_pack.num_valid, alone.num_valid) << "document " << d;
    EXPECT_NEAR(in_pack.loss_sum, alone.loss_sum, 1e-5 * std::fabs(alone.loss_sum))
        << "document " << d;
    sum += alone.loss_sum;
    valid += alone.num_valid;
    offset += len[d];
  }
  EXPECT_EQ(packed.num_valid, valid);
  EXPECT_NEAR(packed.loss_sum, sum, 1e-5 * std::fabs(sum));
  const std::vector<float> g_docs = grads_vector();
  ASSERT_EQ(g_packed.size(), g_docs.size());
  float gmax = 0;
  for (float g : g_docs) gmax = std::max(gmax, std::fabs(g));
  for (size_t i = 0; i < g_docs.size(); ++i) {
    ASSERT_NEAR(g_packed[i], g_docs[i], 1e-5f * gmax) << "gradient element " << i;
  }
}

// ---- One forward for every mode ----

// Causal mask over the whole cache for queries at positions [p0, p0 + s): [b, s, cache_len].
Tensor CacheMask(int64_t b, int64_t s, int64_t p0, int64_t cache_len) {
  std::vector<float> m(b * s * cache_len, 0.f);
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t i = 0; i < s; ++i) {
      for (int64_t j = 0; j <= p0 + i; ++j) m[(bi * s + i) * cache_len + j] = 1.f;
    }
  }
  return ValueOrDie(Tensor::FromVector(m, {b, s, cache_len}, DType::kBool));
}

Tensor Positions(int64_t b, int64_t s, int64_t p0) {
  std::vector<int64_t> p;
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t i = 0; i < s; ++i) p.push_back(p0 + i);
  }
  return ValueOrDie(Tensor::FromVector(p, {b, s}));
}

// The training forward (saved activations) and the evaluation forward are one code path over
// the same ops: their logits are bit-identical. Prefill + cached decoding reads K/V from the
// cache instead and matches to rounding.
TEST(DecoderForwardModesTest, TrainingEvaluationAndCachedDecodingAgree) {
  using P = ops::RopePairing;
  for (const auto& [name, n_kv] :
       std::vector<std::pair<std::string, int64_t>>{{"mha", 4}, {"gqa", 2}, {"mqa", 1}}) {
    for (bool tied : {false, true}) {
      SCOPED_TRACE(absl::StrCat(name, tied ? " tied" : " untied"));
      const DecoderConfig config = Tiny(17, 4, n_kv, 24, tied, /*bias=*/!tied, P::kInterleaved);
      Model m = MakeModel(config, 301 + n_kv);
      const int64_t b = 2, s = 7, v = config.vocab_size;
      Generator gen(302);
      std::vector<int64_t> ids(b * s);
      for (int64_t& t : ids) t = static_cast<int64_t>(gen.UniformInt(v));
      const Tensor tokens = ValueOrDie(Tensor::FromVector(ids, {b, s}));

      Tensor eval_logits = ValueOrDie(Tensor::Empty({b, s, v}, DType::kF32));
      ASSERT_TRUE(m.decoder->Forward(eval_logits, tokens).ok());
      TransformerDecoder::Activations acts;
      ActivationStore store;
      Tensor train_logits = ValueOrDie(Tensor::Empty({b, s, v}, DType::kF32));
      ASSERT_TRUE(m.decoder->Forward(train_logits, tokens, nullptr, nullptr, &acts, &store).ok());
      const std::vector<float> want = ValueOrDie(eval_logits.ToFloatVector());
      const std::vector<float> got = ValueOrDie(train_logits.ToFloatVector());
      int64_t differ = 0;
      for (size_t i = 0; i < want.size(); ++i) differ += want[i] != got[i];
      EXPECT_EQ(differ, 0) << "training-mode logits differ from the evaluation forward's";
      EXPECT_EQ(acts.hs.size(), m.decoder->num_layers() + 1);
      EXPECT_TRUE(acts.layers[0].attn.lse.defined());

      // Prefill 3 tokens, then decode the other 4 one at a time.
      double max_abs = 0;
      for (float x : want) max_abs = std::max(max_abs, static_cast<double>(std::fabs(x)));
      ASSERT_TRUE(m.decoder->SetupCaches(b, DType::kF32).ok());
      const int64_t cache_len = config.max_seq_len, s0 = 3;
      double worst = 0;
      auto check = [&](int64_t p0, int64_t len) {
        Tensor chunk = ValueOrDie(ValueOrDie(tokens.Narrow(1, p0, len)).Contiguous());
        const Tensor mask = CacheMask(b, len, p0, cache_len);
        const Tensor pos = Positions(b, len, p0);
        Tensor logits = ValueOrDie(Tensor::Empty({b, len, v}, DType::kF32));
        ASSERT_TRUE(m.decoder->Forward(logits, chunk, &mask, &pos).ok());
        const std::vector<float> l = ValueOrDie(logits.ToFloatVector());
        for (int64_t bi = 0; bi < b; ++bi) {
          for (int64_t i = 0; i < len; ++i) {
            for (int64_t k = 0; k < v; ++k) {
              const double d = std::fabs(l[(bi * len + i) * v + k] -
                                         want[(bi * s + p0 + i) * v + k]);
              worst = std::max(worst, d);
            }
          }
        }
      };
      check(0, s0);
      for (int64_t p = s0; p < s; ++p) check(p, 1);
      // Cached decoding runs the m = 1 streaming GEMV (its own tile shapes and horizontal
      // sums, different per ISA level) where the full forward runs m = b·s rows, so the f32
      // sums round in another order: tens of ULPs of the largest logit after two layers and a
      // softmax (1.2e-6·max seen at --config=avx2). A wrong cache is off by O(max).
      EXPECT_LE(worst, 3e-5 * max_abs) << "cached decoding vs full forward";
      m.decoder->DeleteCaches();
    }
  }
}

// After the first step has sized the workspace, steps allocate no storage: activations,
// temporaries, the logits chunk and the losses are reused and zeroed in place.
TEST(DecoderTrainerWorkspaceTest, StepsAfterTheFirstAllocateNothing) {
  for (bool ckpt : {false, true}) {
    for (bool lora : {false, true}) {
      SCOPED_TRACE(absl::StrCat(ckpt ? "checkpointing" : "all activations", lora ? ", lora" : ""));
      const Case c = Cases()[2];  // packed: mask and positions
      std::unique_ptr<TransformerDecoder> decoder;
      ParameterArena params, grads;
      DecoderTrainerOptions opts;
      opts.activation_checkpointing = ckpt;
      opts.logits_chunk_rows = 4;  // a partial last chunk
      if (lora) {
        LoRAOptions lo = TinyLoRA(true);
        lo.lora_dropout = 0.1;
        LoRAModel m = MakeLoRAModel(c.config, lo, 401);
        decoder = std::move(m.decoder);
        params = std::move(m.params);
        grads = std::move(m.grads);
        opts.frozen_if_missing = true;
      } else {
        Model m = MakeModel(c.config, 402);
        decoder = std::move(m.decoder);
        params = std::move(m.params);
        grads = std::move(m.grads);
      }
      Generator gen(403);
      const Data data = MakeData(c, gen);
      auto trainer = ValueOrDie(DecoderTrainer::Create(decoder.get(), &grads, opts));
      Generator drop_gen(7);
      trainer->set_generator(&drop_gen);
      auto step = [&] {
        ASSERT_TRUE(grads.Zero().ok());
        ASSERT_TRUE(trainer
                        ->ForwardBackward(data.t_tokens, data.t_labels, &data.t_mask,
                                          &data.t_positions)
                        .ok());
      };
      step();
      const int64_t before = GetMemoryStats(Device::Cpu()).total_allocations;
      for (int i = 2; i <= 4; ++i) step();
      EXPECT_EQ(GetMemoryStats(Device::Cpu()).total_allocations - before, 0);
    }
  }
}

}  // namespace
}  // namespace cctune
