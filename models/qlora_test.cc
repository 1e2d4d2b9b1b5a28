#include "models/qlora.h"

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/random.h"
#include "core/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/gemm/gemm.h"
#include "kernels/cpu/nf4.h"
#include "models/decoder_builder.h"
#include "models/lora.h"
#include "models/registry.h"
#include "modules/parameters.h"

namespace cctune {
namespace {

using ::testing::HasSubstr;

// torchtune 0.6.1's llama3_2/1B_qlora_single_device and 1B_lora_single_device model keys.
ConfigNode Torchtune1BModelArgs() {
  ConfigNode args = ConfigNode::Map();
  args.Set("lora_attn_modules",
           ConfigNode::List({ConfigNode::String("q_proj"), ConfigNode::String("v_proj"),
                             ConfigNode::String("output_proj")}));
  args.Set("apply_lora_to_mlp", ConfigNode::Bool(true));
  args.Set("lora_rank", ConfigNode::Int(64));
  args.Set("lora_alpha", ConfigNode::Int(128));
  return args;
}

TEST(QLoRABuildersTest, TorchtunesQLoRABuildersExistUnderBothSpellings) {
  ConfigNode args = ConfigNode::Map();
  args.Set("lora_attn_modules", ConfigNode::List({ConfigNode::String("q_proj")}));
  for (const char* name : {"llama3_2.qlora_llama3_2_1b", "llama3_2.qlora_llama3_2_3b",
                           "llama3_1.qlora_llama3_1_8b", "llama3_1.qlora_llama3_1_70b",
                           "llama3_1.qlora_llama3_1_405b", "llama3.qlora_llama3_8b",
                           "llama3.qlora_llama3_70b", "llama2.qlora_llama2_7b",
                           "llama2.qlora_llama2_13b", "llama2.qlora_llama2_70b",
                           "mistral.qlora_mistral_7b"}) {
    for (const char* prefix : {"torchtune.models.", "cctune.models."}) {
      auto m = BuildModel(std::string(prefix) + name, args);
      ASSERT_TRUE(m.ok()) << prefix << name << ": " << m.status();
      EXPECT_FALSE(Nf4Layers(**m).empty()) << name;
    }
  }
  // torchtune has no QLoRA builders for Qwen 2.5.
  EXPECT_FALSE(BuildModel("torchtune.models.qwen2_5.qlora_qwen2_5_0_5b", args).ok());
  // quantize_base=false turns a qlora_ builder back into its lora_ twin.
  args.Set("quantize_base", ConfigNode::Bool(false));
  EXPECT_TRUE(Nf4Layers(*ValueOrDie(BuildModel("cctune.models.llama3_2.qlora_llama3_2_1b", args)))
                  .empty());
}

// torchtune's semantics: the base of every attention and MLP projection is NF4, adapted or
// not; the tied output, embeddings and norms are not. And the memory of 1B QLoRA vs LoRA.
TEST(QLoRABuildersTest, Llama3_2_1BParameterBytesAgainstLoRA) {
  const ConfigNode args = Torchtune1BModelArgs();
  auto q = ValueOrDie(BuildModel("torchtune.models.llama3_2.qlora_llama3_2_1b", args));
  auto l = ValueOrDie(BuildModel("torchtune.models.llama3_2.lora_llama3_2_1b", args));
  const std::vector<std::string> layers = Nf4Layers(*q);
  EXPECT_EQ(layers.size(), 16u * 7);  // q, k, v, output_proj, w1, w2, w3 per layer
  EXPECT_EQ(layers[0], "layers.0.attn.q_proj");
  const ParameterBytes qb = CountParameterBytes(*q, DType::kBF16);
  const ParameterBytes lb = CountParameterBytes(*l, DType::kBF16);
  // Per layer: 2048² · 2 (q, output) + 2048 · 512 · 2 (k, v) + 2048 · 8192 · 3 (MLP).
  const int64_t per_layer = 2048 * 2048 * 2 + 2048 * 512 * 2 + 2048 * 8192 * 3;
  EXPECT_EQ(qb.nf4_elements, 16 * per_layer);
  EXPECT_EQ(qb.nf4, 16 * cpu::Nf4Bytes(2048 * 2048) * 2 + 16 * cpu::Nf4Bytes(2048 * 512) * 2 +
                        16 * cpu::Nf4Bytes(2048 * 8192) * 3);
  EXPECT_EQ(qb.adapters, lb.adapters);
  EXPECT_EQ(lb.nf4, 0);
  // What stays bf16 in QLoRA: the (tied) embedding and the norms.
  EXPECT_EQ(qb.other, (128256 * 2048 + 33 * 2048) * 2);
  EXPECT_EQ(lb.other, qb.other + 16 * per_layer * 2);
  std::printf("llama3_2 1B (torchtune's 1B_qlora keys, bf16): QLoRA %.1f MiB (NF4 base %.1f, "
              "adapters %.1f, embedding+norms %.1f) vs LoRA %.1f MiB: %.2fx\n",
              qb.total() / 1048576.0, qb.nf4 / 1048576.0, qb.adapters / 1048576.0,
              qb.other / 1048576.0, lb.total() / 1048576.0,
              static_cast<double>(lb.total()) / qb.total());
  // The base projections: 0.516 byte per weight instead of 2.
  EXPECT_NEAR(static_cast<double>(qb.nf4) / qb.nf4_elements, 0.5 + 1.0 / 64, 1e-3);
  EXPECT_LT(qb.total(), lb.total() * 6 / 10);
}

DecoderConfig SmallConfig() {
  DecoderConfig c;
  c.vocab_size = 300;  // the output is never NF4: any size
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.embed_dim = 256;  // k/v: 256 · 128 = 2 NF4 groups
  c.intermediate_dim = 512;
  c.max_seq_len = 64;
  return c;
}

// A QLoRA model loaded by quantizing a full-precision state dict computes the logits of the
// LoRA model holding the dequantized weights, and the checkpoint it saves is those weights.
TEST(QLoRAModelTest, LogitsMatchLoRAOverTheDequantizedWeights) {
  LoRAOptions opts;
  opts.lora_attn_modules = {"q_proj", "v_proj"};
  opts.apply_lora_to_mlp = true;
  opts.apply_lora_to_output = true;
  opts.lora_rank = 4;
  opts.lora_alpha = 8;
  auto full = ValueOrDie(BuildDecoder(SmallConfig()));
  auto full_arena = ValueOrDie(ParameterArena::Create(*full, DType::kBF16, Device::Cpu()));
  Generator gen(7);
  ASSERT_TRUE(full_arena.InitializeRandom(gen).ok());
  const StateDict checkpoint = full_arena.ExportStateDict();

  opts.quantize_base = true;
  auto q = ValueOrDie(BuildLoRADecoder(SmallConfig(), opts));
  opts.quantize_base = false;
  auto l = ValueOrDie(BuildLoRADecoder(SmallConfig(), opts));
  const std::vector<std::string> layers = Nf4Layers(*q);
  // Every attention and MLP projection; not the output, though it has an adapter (torchtune).
  ASSERT_EQ(layers.size(), 2u * 7);
  auto qa = ValueOrDie(ParameterArena::Create(*q, DType::kBF16, Device::Cpu()));
  // The LoRA model in f32, so that only the order of the sums differs.
  auto la = ValueOrDie(ParameterArena::Create(*l, DType::kF32, Device::Cpu()));
  const std::vector<std::string> consumed = ValueOrDie(QuantizeNf4Weights(checkpoint, layers, qa));
  EXPECT_EQ(consumed.size(), layers.size());
  StateDict rest = checkpoint;
  for (const std::string& n : consumed) rest.erase(n);
  auto report = ValueOrDie(qa.LoadStateDict(rest, /*strict=*/false));
  EXPECT_TRUE(report.unexpected.empty());
  // Trained (non-zero) adapters; the LoRA model gets them with the dequantized base below.
  Generator agen(8);
  for (const auto& [name, t] : qa.ExportStateDict()) {
    if (!IsLoRAParameter(name)) continue;
    Tensor v = t;  // a view of the arena
    ASSERT_TRUE(FillNormal(v, 0.0, 0.05, agen).ok());
  }
  const StateDict dequantized = ValueOrDie(DequantizedStateDict(qa.ExportStateDict(), layers,
                                                                DType::kBF16));
  for (const auto& [name, t] : dequantized) {
    EXPECT_EQ(name.find(".nf4."), std::string::npos) << name;
  }
  EXPECT_EQ(dequantized.at("layers.0.mlp.w1.weight").shape(), (Shape{512, 256}));
  EXPECT_EQ(dequantized.at("layers.0.mlp.w1.weight").dtype(), DType::kBF16);
  ASSERT_TRUE(la.LoadStateDict(ValueOrDie(DequantizedStateDict(qa.ExportStateDict(), layers,
                                                                DType::kF32)),
                                /*strict=*/true)
                  .ok());

  // The NF4 round trip stays close to the checkpoint.
  const std::vector<double> w0 = ValueOrDie(checkpoint.at("layers.1.attn.k_proj.weight").ToDoubleVector());
  const std::vector<double> w1 = ValueOrDie(dequantized.at("layers.1.attn.k_proj.weight").ToDoubleVector());
  double err = 0, ref = 0;
  for (size_t i = 0; i < w0.size(); ++i) {
    err += (w1[i] - w0[i]) * (w1[i] - w0[i]);
    ref += w0[i] * w0[i];
  }
  EXPECT_LT(std::sqrt(err / ref), 0.12);

  Tensor tokens = ValueOrDie(Tensor::FromVector(std::vector<int64_t>{1, 5, 299, 42, 7, 7, 0, 100},
                                                {2, 4}));
  // f32 activations on both sides (the LoRA model's bf16 weights may round them otherwise:
  // kernels/cpu/gemm/gemm.h); what differs is then the NF4 path alone.
  cpu::ScopedExactGemm exact;
  const std::vector<double> ql = ValueOrDie(ValueOrDie((*q)(tokens)).ToDoubleVector());
  const std::vector<double> ll = ValueOrDie(ValueOrDie((*l)(tokens)).ToDoubleVector());
  ASSERT_EQ(ql.size(), ll.size());
  double max_diff = 0, max_abs = 0;
  for (size_t i = 0; i < ql.size(); ++i) {
    max_diff = std::max(max_diff, std::fabs(ql[i] - ll[i]));
    max_abs = std::max(max_abs, std::fabs(ll[i]));
  }
  EXPECT_LT(max_diff, 1e-4 * max_abs) << max_diff << " of " << max_abs;
  EXPECT_GT(max_abs, 0.0);
}

TEST(QLoRAModelTest, ErrorsNameTheTensor) {
  LoRAOptions opts;
  opts.quantize_base = true;
  DecoderConfig c = SmallConfig();
  c.embed_dim = 32;
  c.intermediate_dim = 64;
  const absl::Status st = BuildLoRADecoder(c, opts).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(st.message()), HasSubstr("q_proj.weight [32, 32] has 1024 elements"));

  auto q = ValueOrDie(BuildLoRADecoder(SmallConfig(), opts));
  auto qa = ValueOrDie(ParameterArena::Create(*q, DType::kBF16, Device::Cpu()));
  const absl::Status missing = QuantizeNf4Weights(StateDict(), Nf4Layers(*q), qa).status();
  EXPECT_THAT(std::string(missing.message()),
              HasSubstr("the checkpoint has no layers.0.attn.q_proj.weight"));
  StateDict bad;
  bad["layers.0.attn.q_proj.weight"] = ValueOrDie(Tensor::Zeros({256, 128}, DType::kBF16));
  const absl::Status shape = QuantizeNf4Weights(bad, Nf4Layers(*q), qa).status();
  EXPECT_THAT(std::string(shape.message()), HasSubstr("layers.0.attn.q_proj.weight"));
}

}  // namespace
}  // namespace cctune
