// Parity with torchtune's TransformerDecoder (tests/assets/goldens/decoder_*.safetensors),
// built through BuildDecoder: MHA 32/32 (untied), GQA 32/8 (Llama 3.1 scaled RoPE, tied
// output) and MQA 32/1 (Qwen2-style biases and half-split RoPE). Full-sequence logits without
// a cache, then a cached 5-token prefill and single-token decode steps, in both cache
// layouts. fp32, rel <= 1e-5.
#include <string>

#include "gtest/gtest.h"
#include "models/decoder_builder.h"
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
  std::unique_ptr<TransformerDecoder> model;
  ParameterArena arena;
};

Loaded Load(const std::string& kind) {
  Loaded l{ValueOrDie(testing::LoadGolden("decoder_" + kind + ".safetensors")), nullptr, {}};
  const testing::Golden& g = l.golden;
  DecoderConfig c;
  c.vocab_size = g.Int("vocab_size");
  c.num_layers = g.Int("num_layers");
  c.num_heads = g.Int("num_heads");
  c.num_kv_heads = g.Int("num_kv_heads");
  c.embed_dim = g.Int("embed_dim");
  c.head_dim = g.Int("head_dim");
  c.intermediate_dim = g.Int("intermediate_dim");
  c.max_seq_len = g.Int("max_seq_len");
  c.norm_eps = static_cast<float>(g.Double("norm_eps"));
  c.rope_base = g.Double("rope_base");
  c.rope_pairing = g.RopePairing();
  c.rope_scaling = g.RopeScaling();
  c.qkv_bias = g.Int("qkv_bias") != 0;
  c.tie_word_embeddings = g.Int("tied") != 0;
  l.model = ValueOrDie(BuildDecoder(c));
  l.arena = ValueOrDie(ParameterArena::Create(*l.model, DType::kF32, Device::Cpu()));
  CCTUNE_CHECK_OK(l.arena.LoadStateDict(g.weights));  // strict, by torchtune name
  return l;
}

class DecoderGoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(DecoderGoldenTest, FullSequenceLogitsMatchTorchtune) {
  Loaded l = Load(GetParam());
  const double err = MaxRelError(ToVec(ValueOrDie((*l.model)(l.golden.Io("tokens")))),
                                 ToVec(l.golden.Io("logits")));
  EXPECT_LE(err, kTolerance);
  std::printf("[%s] decoder, no cache: rel error %.2e\n", GetParam().c_str(), err);
}

TEST_P(DecoderGoldenTest, CachedPrefillAndDecodeMatchTorchtune) {
  for (KvCacheLayout layout : {KvCacheLayout::kGrouped, KvCacheLayout::kExpanded}) {
    Loaded l = Load(GetParam());
    const testing::Golden& g = l.golden;
    const int64_t b = g.Int("batch"), s = g.Int("seq"), prefill = g.Int("prefill"),
                  max_len = g.Int("max_seq_len");
    ASSERT_TRUE(l.model->SetupCaches(b, DType::kF32, max_len, layout).ok());
    const Tensor& tokens = g.Io("tokens");
    double worst = 0;
    for (int64_t pos = 0; pos < s;) {
      const int64_t len = pos == 0 ? prefill : 1;
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
      Tensor step = ValueOrDie(ValueOrDie(tokens.Narrow(1, pos, len)).Contiguous());
      Tensor logits = ValueOrDie((*l.model)(step, &mask, &input_pos));
      const std::string key =
          pos == 0 ? "cache_prefill_logits" : "cache_step_" + std::to_string(pos) + "_logits";
      const double err = MaxRelError(ToVec(logits), ToVec(g.Io(key)));
      EXPECT_LE(err, kTolerance) << key << " layout " << KvCacheLayoutName(layout);
      worst = std::max(worst, err);
      pos += len;
    }
    std::printf("[%s] decoder, %s caches (%zu bytes): worst rel error %.2e\n", GetParam().c_str(),
                KvCacheLayoutName(layout), l.model->KvCacheBytes(), worst);
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, DecoderGoldenTest, ::testing::Values("mha", "gqa", "mqa"));

}  // namespace
}  // namespace cctune
