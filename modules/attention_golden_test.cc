// Parity with torchtune's MultiHeadAttention (tests/assets/goldens/attention_*.safetensors):
// MHA 32/32, GQA 32/8 (with q/k norms, Llama 3.1 scaled RoPE) and MQA 32/1 (q/k/v biases,
// half-split RoPE), without a cache (causal, explicit mask, offset positions) and with a KV
// cache (prefill, then single-token decode steps), in both cache layouts. fp32, rel <= 1e-5.
#include <string>

#include "gtest/gtest.h"
#include "modules/attention.h"
#include "modules/golden.h"
#include "modules/parameters.h"
#include "modules/reference.h"

namespace cctune {
namespace {

using reference::MaxRelError;
using reference::ToVec;

constexpr double kTolerance = 1e-5;

struct Loaded {
  testing::Golden golden;
  std::unique_ptr<MultiHeadAttention> mha;
  ParameterArena arena;
};

Loaded Load(const std::string& kind) {
  Loaded l{ValueOrDie(testing::LoadGolden("attention_" + kind + ".safetensors")), nullptr, {}};
  const testing::Golden& g = l.golden;
  const int64_t d = g.Int("embed_dim"), n_h = g.Int("num_heads"), n_kv = g.Int("num_kv_heads"),
                h_d = g.Int("head_dim"), max_len = g.Int("max_seq_len");
  const bool bias = g.Int("qkv_bias") != 0;
  MultiHeadAttentionArgs a;
  a.embed_dim = d;
  a.num_heads = n_h;
  a.num_kv_heads = n_kv;
  a.head_dim = h_d;
  a.q_proj = std::make_unique<Linear>(d, n_h * h_d, bias);
  a.k_proj = std::make_unique<Linear>(d, n_kv * h_d, bias);
  a.v_proj = std::make_unique<Linear>(d, n_kv * h_d, bias);
  a.output_proj = std::make_unique<Linear>(n_h * h_d, d);
  a.pos_embeddings = std::make_shared<RotaryPositionalEmbeddings>(
      h_d, max_len, g.Double("rope_base"), g.RopePairing(), g.RopeScaling());
  if (g.Int("qk_norm") != 0) {
    a.q_norm = std::make_unique<RMSNorm>(h_d, static_cast<float>(g.Double("norm_eps")));
    a.k_norm = std::make_unique<RMSNorm>(h_d, static_cast<float>(g.Double("norm_eps")));
  }
  a.max_seq_len = max_len;
  l.mha = ValueOrDie(MultiHeadAttention::Create(std::move(a)));
  l.arena = ValueOrDie(ParameterArena::Create(*l.mha, DType::kF32, Device::Cpu()));
  // Strict: every torchtune name must map onto a parameter and vice versa (bf16 -> f32).
  CCTUNE_CHECK_OK(l.arena.LoadStateDict(g.weights));
  return l;
}

Tensor Columns(const Tensor& t, int64_t start, int64_t len) {
  return ValueOrDie(ValueOrDie(t.Narrow(1, start, len)).Contiguous());
}

class AttentionGoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(AttentionGoldenTest, NoCacheMatchesTorchtune) {
  Loaded l = Load(GetParam());
  const testing::Golden& g = l.golden;
  const Tensor& x = g.Io("x");
  const double e1 = MaxRelError(ToVec(ValueOrDie((*l.mha)(x))), ToVec(g.Io("out_causal")));
  const Tensor& mask = g.Io("mask");
  const double e2 = MaxRelError(ToVec(ValueOrDie((*l.mha)(x, &mask))), ToVec(g.Io("out_mask")));
  const Tensor& pos = g.Io("input_pos");
  const double e3 =
      MaxRelError(ToVec(ValueOrDie((*l.mha)(x, nullptr, &pos))), ToVec(g.Io("out_input_pos")));
  EXPECT_LE(e1, kTolerance);
  EXPECT_LE(e2, kTolerance);
  EXPECT_LE(e3, kTolerance);
  std::printf("[%s] no cache: causal %.2e, mask %.2e, input_pos %.2e\n", GetParam().c_str(), e1, e2,
              e3);
}

TEST_P(AttentionGoldenTest, KvCachePrefillAndDecodeMatchTorchtune) {
  for (KvCacheLayout layout : {KvCacheLayout::kGrouped, KvCacheLayout::kExpanded}) {
    Loaded l = Load(GetParam());
    const testing::Golden& g = l.golden;
    const int64_t b = g.Int("batch"), s = g.Int("seq"), prefill = g.Int("prefill"),
                  max_len = g.Int("max_seq_len");
    ASSERT_TRUE(l.mha->SetupCache(b, DType::kF32, max_len, layout).ok());
    const Tensor& x = g.Io("x");
    double worst = 0;
    for (int64_t pos = 0; pos < s;) {
      const int64_t len = pos == 0 ? prefill : 1;
      // torchtune's masks span the whole cache: rows [pos, pos + len) of a causal mask.
      Tensor mask = ValueOrDie(Tensor::Empty({b, len, max_len}, DType::kBool));
      std::vector<int64_t> ip;
      for (int64_t bi = 0; bi < b; ++bi) {
        for (int64_t i = 0; i < len; ++i) {
          ip.push_back(pos + i);
          for (int64_t j = 0; j < max_len; ++j) {
            mask.data<bool>()[(bi * len + i) * max_len + j] = j <= pos + i;
          }
        }
      }
      Tensor input_pos = ValueOrDie(Tensor::FromVector(ip, {b, len}));
      Tensor y = ValueOrDie((*l.mha)(Columns(x, pos, len), &mask, &input_pos));
      const std::string key = pos == 0 ? "cache_prefill" : "cache_step_" + std::to_string(pos);
      const double err = MaxRelError(ToVec(y), ToVec(g.Io(key)));
      EXPECT_LE(err, kTolerance) << key << " layout " << KvCacheLayoutName(layout);
      worst = std::max(worst, err);
      pos += len;
    }
    EXPECT_EQ(l.mha->kv_cache()->Size(), s);
    std::printf("[%s] %s cache (%zu bytes): worst prefill/decode rel error %.2e\n",
                GetParam().c_str(), KvCacheLayoutName(layout), l.mha->kv_cache()->Bytes(), worst);
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, AttentionGoldenTest, ::testing::Values("mha", "gqa", "mqa"));

}  // namespace
}  // namespace cctune
