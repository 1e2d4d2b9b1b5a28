#include "models/lora.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "checkpoint/hf.h"
#include "checkpoint/peft.h"
#include "core/random.h"
#include "core/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/decoder_builder.h"
#include "models/registry.h"
#include "modules/lora_linear.h"
#include "modules/parameters.h"

namespace cctune {
namespace {

using ::testing::HasSubstr;

// A registered model builder's numbers.
DecoderConfig Config(const char* name) {
  CCTUNE_CHECK_OK(RegisterModelComponents());
  return ValueOrDie(ModelConfig(name));
}

int64_t NumBase(const Module& m) { return m.NumParameters() - NumLoRAParameters(m); }

// Counts recorded from torchtune 0.6.1's builders on the meta device (torch 2.15):
//   lora_llama3_2_1b(lora_attn_modules=["q_proj", "v_proj"], lora_rank=8, lora_alpha=16)
//     total 1236666368, base 1235814400 (= llama3_2_1b()), adapters 851968
//   lora_llama3_2_1b(["q_proj", "k_proj", "v_proj", "output_proj"], apply_lora_to_mlp=True,
//                    lora_rank=16, lora_alpha=32): adapters 11272192
//   lora_llama3_1_8b(["q_proj", "v_proj"], apply_lora_to_mlp=True, apply_lora_to_output=True,
//                    lora_rank=8): total 8048883712, base 8030261248, adapters 18622464
TEST(LoRABuildersTest, ParameterCountsMatchTorchtune) {
  LoRAOptions qv;
  qv.lora_attn_modules = {"q_proj", "v_proj"};
  qv.lora_rank = 8;
  qv.lora_alpha = 16;
  auto m = ValueOrDie(BuildLoRADecoder(Config("cctune.models.llama3_2.llama3_2_1b"), qv));
  EXPECT_EQ(m->NumParameters(), 1236666368);
  EXPECT_EQ(NumBase(*m), 1235814400);
  EXPECT_EQ(NumLoRAParameters(*m), 851968);
  // Σ rank·(in + out): q 2048 -> 2048, v 2048 -> 512, 16 layers.
  EXPECT_EQ(NumLoRAParameters(*m), 16 * (LoRAAdapterNumParameters(2048, 2048, 8) +
                                         LoRAAdapterNumParameters(2048, 512, 8)));
  auto arena = ValueOrDie(ParameterArena::Create(*m, DType::kBF16, Device::Meta()));
  EXPECT_EQ(arena.NumParameters(), 1236666368);

  LoRAOptions all;
  all.lora_attn_modules = {"q_proj", "k_proj", "v_proj", "output_proj"};
  all.apply_lora_to_mlp = true;
  all.lora_rank = 16;
  all.lora_alpha = 32;
  auto m2 = ValueOrDie(BuildLoRADecoder(Config("cctune.models.llama3_2.llama3_2_1b"), all));
  EXPECT_EQ(NumLoRAParameters(*m2), 11272192);
  EXPECT_EQ(NumBase(*m2), 1235814400);

  LoRAOptions big = qv;
  big.apply_lora_to_mlp = true;
  big.apply_lora_to_output = true;
  auto m3 = ValueOrDie(BuildLoRADecoder(Config("cctune.models.llama3_1.llama3_1_8b"), big));
  EXPECT_EQ(m3->NumParameters(), 8048883712);
  EXPECT_EQ(NumBase(*m3), 8030261248);
  EXPECT_EQ(NumLoRAParameters(*m3), 18622464);
}

TEST(LoRABuildersTest, BaseCountsEqualThePlainBuilders) {
  LoRAOptions o;
  o.lora_attn_modules = {"q_proj", "k_proj", "v_proj", "output_proj"};
  o.apply_lora_to_mlp = true;
  o.lora_rank = 4;
  for (auto cfg :
       {Config("cctune.models.llama3_2.llama3_2_1b"), Config("cctune.models.llama3_1.llama3_1_8b"),
        Config("cctune.models.llama2.llama2_7b"), Config("cctune.models.qwen2_5.qwen2_5_0_5b")}) {
    auto plain = ValueOrDie(BuildDecoder(cfg));
    auto lora = ValueOrDie(BuildLoRADecoder(cfg, o));
    EXPECT_EQ(NumBase(*lora), plain->NumParameters()) << DecoderConfigString(cfg);
    const int64_t d = cfg.embed_dim, f = cfg.intermediate_dim;
    const int64_t hd = cfg.head_dim > 0 ? cfg.head_dim : d / cfg.num_heads;
    const int64_t q = cfg.num_heads * hd, kv = cfg.num_kv_heads * hd;
    const int64_t per_layer =
        LoRAAdapterNumParameters(d, q, 4) + 2 * LoRAAdapterNumParameters(d, kv, 4) +
        LoRAAdapterNumParameters(q, d, 4) + 2 * LoRAAdapterNumParameters(d, f, 4) +
        LoRAAdapterNumParameters(f, d, 4);
    EXPECT_EQ(NumLoRAParameters(*lora), cfg.num_layers * per_layer) << DecoderConfigString(cfg);
  }
}

TEST(LoRABuildersTest, NamesAndTrainableLayout) {
  // vocab, layers, heads, kv heads, width, hidden, context
  const DecoderConfig c = WithSizes(DecoderConfig(), {17, 2, 4, 2, 16, 24, 16});
  LoRAOptions o;
  o.lora_attn_modules = {"q_proj", "output_proj"};
  o.apply_lora_to_output = true;
  o.lora_rank = 2;
  auto m = ValueOrDie(BuildLoRADecoder(c, o));
  std::vector<std::string> names;
  for (const auto& [name, p] : m->NamedParameters()) names.push_back(name);
  auto has = [&](const std::string& n) {
    return std::find(names.begin(), names.end(), n) != names.end();
  };
  EXPECT_TRUE(has("layers.0.attn.q_proj.weight"));
  EXPECT_TRUE(has("layers.0.attn.q_proj.lora_a.weight"));
  EXPECT_TRUE(has("layers.1.attn.output_proj.lora_b.weight"));
  EXPECT_TRUE(has("output.lora_a.weight"));
  EXPECT_FALSE(has("layers.0.attn.k_proj.lora_a.weight"));
  EXPECT_FALSE(has("layers.0.mlp.w1.lora_a.weight"));
  ParameterLayout layout = ValueOrDie(LoRATrainableLayout(*m));
  std::vector<std::string> trainable;
  for (const auto& e : layout.entries()) trainable.push_back(e.spec.name);
  EXPECT_EQ(trainable, (std::vector<std::string>{
                           "layers.0.attn.q_proj.lora_a.weight",
                           "layers.0.attn.q_proj.lora_b.weight",
                           "layers.0.attn.output_proj.lora_a.weight",
                           "layers.0.attn.output_proj.lora_b.weight",
                           "layers.1.attn.q_proj.lora_a.weight",
                           "layers.1.attn.q_proj.lora_b.weight",
                           "layers.1.attn.output_proj.lora_a.weight",
                           "layers.1.attn.output_proj.lora_b.weight",
                           "output.lora_a.weight",
                           "output.lora_b.weight",
                       }));
  EXPECT_EQ(layout.Find("output.lora_a.weight")->spec.shape, (Shape{2, 16}));
  EXPECT_EQ(layout.Find("output.lora_b.weight")->spec.shape, (Shape{17, 2}));
  EXPECT_EQ(layout.NumParameters(), NumLoRAParameters(*m));
  EXPECT_FALSE(IsLoRAParameter("layers.0.attn.q_proj.weight"));
}

TEST(LoRABuildersTest, RejectsBadOptions) {
  LoRAOptions o;
  o.lora_attn_modules = {"q_proj", "gate_proj"};
  absl::Status st = BuildLoRADecoder(Config("cctune.models.llama3_2.llama3_2_1b"), o).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("gate_proj"), std::string::npos) << st;
  o.lora_attn_modules = {"q_proj"};
  o.lora_rank = 0;
  EXPECT_FALSE(BuildLoRADecoder(Config("cctune.models.llama3_2.llama3_2_1b"), o).ok());
  o.lora_rank = 8;
  o.apply_lora_to_output = true;  // llama3_2_1b ties its embeddings
  st = BuildLoRADecoder(Config("cctune.models.llama3_2.llama3_2_1b"), o).status();
  EXPECT_NE(st.message().find("tied"), std::string::npos) << st;
  EXPECT_TRUE(BuildLoRADecoder(Config("cctune.models.llama3_1.llama3_1_8b"), o).ok());
}

TEST(LoRABuildersTest, RegistryResolvesBothSpellings) {
  ConfigNode args = ConfigNode::Map();
  args.Set("lora_attn_modules",
           ConfigNode::List({ConfigNode::String("q_proj"), ConfigNode::String("v_proj")}));
  args.Set("lora_rank", ConfigNode::Int(8));
  args.Set("lora_alpha", ConfigNode::Int(16));
  for (const char* name :
       {"torchtune.models.llama3_2.lora_llama3_2_1b", "cctune.models.llama3_2.lora_llama3_2_1b"}) {
    auto m = ValueOrDie(BuildModel(name, args));
    EXPECT_EQ(NumLoRAParameters(*m), 851968) << name;
  }
  EXPECT_TRUE(BuildModel("torchtune.models.llama2.lora_llama2_7b", args).ok());
  EXPECT_TRUE(BuildModel("torchtune.models.qwen2_5.lora_qwen2_5_0_5b", args).ok());
  // The string spelling of a command line.
  args.Set("lora_attn_modules", ConfigNode::String("['q_proj', 'v_proj']"));
  EXPECT_EQ(
      NumLoRAParameters(*ValueOrDie(BuildModel("cctune.models.llama3_1.lora_llama3_1_8b", args))),
      32 * (LoRAAdapterNumParameters(4096, 4096, 8) + LoRAAdapterNumParameters(4096, 1024, 8)));
  absl::Status st = BuildModel("cctune.models.llama3_2.lora_llama3_2_1b").status();
  EXPECT_THAT(std::string(st.message()), HasSubstr("lora_attn_modules"));  // required
  args.Set("lora_rank", ConfigNode::String("x"));
  EXPECT_FALSE(BuildModel("cctune.models.llama3_2.lora_llama3_2_1b", args).ok());
  args.Set("lora_rank", ConfigNode::Int(8));
  args.Set("use_dora", ConfigNode::Bool(true));
  st = BuildModel("cctune.models.llama3_2.lora_llama3_2_1b", args).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kUnimplemented) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("use_dora"));
  args.Set("use_dora", ConfigNode::Bool(false));
  args.Set("quantize_base", ConfigNode::Bool(true));  // QLoRA: models/qlora_test.cc
  EXPECT_TRUE(BuildModel("cctune.models.llama3_2.lora_llama3_2_1b", args).ok());
}

// The export path of a LoRA run: adapters in PEFT layout, and merged weights in HF layout that
// a plain model loads and with which it reproduces the LoRA model's logits.
TEST(LoRAExportTest, MergedHfCheckpointReproducesLoRALogitsAndAdaptersRoundTrip) {
  // vocab, layers, heads, kv heads, width, hidden, context
  const DecoderConfig c = WithSizes(DecoderConfig(), {19, 2, 4, 2, 16, 24, 16});
  LoRAOptions o;
  o.lora_attn_modules = {"q_proj", "k_proj", "v_proj", "output_proj"};
  o.apply_lora_to_mlp = true;
  o.apply_lora_to_output = true;
  o.lora_rank = 2;
  o.lora_alpha = 4;
  auto lora = ValueOrDie(BuildLoRADecoder(c, o));
  auto arena = ValueOrDie(ParameterArena::Create(*lora, DType::kF32, Device::Cpu()));
  Generator gen(3);
  ASSERT_TRUE(arena.InitializeRandom(gen).ok());
  for (const auto& [name, t] : arena.named_tensors()) {  // non-zero lora_b: a trained adapter
    Tensor v = t;
    if (name.find("lora_b") != std::string::npos) {
      ASSERT_TRUE(FillNormal(v, 0.0, 0.3, gen).ok());
    }
  }
  HfModelConfig hf;
  hf.vocab_size = c.vocab_size;
  hf.hidden_size = c.embed_dim;
  hf.intermediate_size = c.intermediate_dim;
  hf.num_hidden_layers = c.num_layers;
  hf.num_attention_heads = c.num_heads;
  hf.num_key_value_heads = c.num_kv_heads;
  hf.head_dim = c.embed_dim / c.num_heads;
  hf.max_position_embeddings = c.max_seq_len;

  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string root = std::string(tmp != nullptr ? tmp : "/tmp") + "/lora_export_test";
  // Adapters first (before merging), then the merged model.
  StateDict adapters_before;
  for (const auto& [name, t] : arena.ExportStateDict()) {
    if (IsLoRAParameter(name)) adapters_before.emplace(name, ValueOrDie(t.Clone()));
  }
  PeftAdapterConfig ac;
  ac.r = o.lora_rank;
  ac.lora_alpha = o.lora_alpha;
  ac.target_modules = LoRATargetModules(adapters_before);
  ASSERT_TRUE(SavePeftAdapter(root + "/adapter", arena.ExportStateDict(), ac, hf).ok());

  const Tensor tokens =
      ValueOrDie(Tensor::FromVector(std::vector<int64_t>{1, 5, 7, 2, 18, 0, 3, 9}, {2, 4}));
  const std::vector<float> want = ValueOrDie(ValueOrDie((*lora)(tokens)).ToFloatVector());
  ASSERT_TRUE(MergeLoRA(*lora).ok());
  ASSERT_TRUE(SaveHfCheckpoint(root + "/merged", BaseStateDict(arena.ExportStateDict()), hf).ok());

  auto plain = ValueOrDie(BuildDecoder(c));
  auto plain_arena = ValueOrDie(ParameterArena::Create(*plain, DType::kF32, Device::Cpu()));
  const HfCheckpoint ckpt = ValueOrDie(LoadHfCheckpoint(root + "/merged"));
  ASSERT_TRUE(plain_arena.LoadStateDict(ckpt.state_dict).ok());
  const std::vector<float> got = ValueOrDie(ValueOrDie((*plain)(tokens)).ToFloatVector());
  ASSERT_EQ(got.size(), want.size());
  double max_diff = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    max_diff = std::max(max_diff, static_cast<double>(std::fabs(got[i] - want[i])));
  }
  EXPECT_LE(max_diff, 1e-5);

  const PeftAdapter back = ValueOrDie(LoadPeftAdapter(root + "/adapter", hf));
  ASSERT_EQ(back.state_dict.size(), adapters_before.size());
  for (const auto& [name, t] : adapters_before) {
    EXPECT_EQ(ValueOrDie(back.state_dict.at(name).ToFloatVector()), ValueOrDie(t.ToFloatVector()))
        << name;
  }
}

}  // namespace
}  // namespace cctune
