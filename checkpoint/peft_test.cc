#include "checkpoint/peft.h"

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/atomic_file.h"
#include "checkpoint/safetensors.h"
#include "core/random.h"
#include "core/status.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace cctune {
namespace {

namespace fs = std::filesystem;

// Scratch directory; TEST_UNDECLARED_OUTPUTS_DIR when set, so the written adapter can be
// checked by hand with tools/golden/check_peft.py.
std::string OutDir(const std::string& name) {
  const char* out = std::getenv("TEST_UNDECLARED_OUTPUTS_DIR");
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(out ? out : (tmp ? tmp : "/tmp"), "/peft_test_", name);
  fs::remove_all(dir);
  return dir;
}

// A tiny Llama: d 16, 4 heads of 6 (h_d != d / n_h on purpose), 2 KV heads, f 20, v 11.
HfModelConfig TinyConfig() {
  HfModelConfig c;
  c.vocab_size = 11;
  c.hidden_size = 16;
  c.intermediate_size = 20;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 6;
  return c;
}

constexpr int64_t kRank = 3;

// torchtune-named adapters on every supported module, random values.
StateDict TinyAdapters(Generator& gen) {
  const int64_t d = 16, q = 24, kv = 12, f = 20, v = 11;
  struct M {
    std::string name;
    int64_t in, out;
  };
  std::vector<M> mods;
  for (int l = 0; l < 2; ++l) {
    const std::string p = absl::StrCat("layers.", l, ".");
    mods.push_back({p + "attn.q_proj", d, q});
    mods.push_back({p + "attn.k_proj", d, kv});
    mods.push_back({p + "attn.v_proj", d, kv});
    mods.push_back({p + "attn.output_proj", q, d});
    mods.push_back({p + "mlp.w1", d, f});
    mods.push_back({p + "mlp.w2", f, d});
    mods.push_back({p + "mlp.w3", d, f});
  }
  mods.push_back({"output", d, v});
  StateDict sd;
  for (const M& m : mods) {
    sd[m.name + ".lora_a.weight"] = ValueOrDie(RandomNormal({kRank, m.in}, DType::kF32, gen));
    sd[m.name + ".lora_b.weight"] = ValueOrDie(RandomNormal({m.out, kRank}, DType::kF32, gen));
  }
  return sd;
}

std::vector<float> F(const Tensor& t) { return ValueOrDie(t.ToFloatVector()); }

// HF row order of an interleaved q/k lora_B, written out directly: within each head, row
// 2p + c (pair p, component c) goes to row c·h_d/2 + p.
std::vector<float> ExpectedHfRows(const std::vector<float>& b, int64_t n_heads, int64_t h_d,
                                  int64_t rank) {
  std::vector<float> out(b.size());
  for (int64_t h = 0; h < n_heads; ++h) {
    for (int64_t p = 0; p < h_d / 2; ++p) {
      for (int64_t c = 0; c < 2; ++c) {
        const int64_t src = h * h_d + 2 * p + c, dst = h * h_d + c * (h_d / 2) + p;
        for (int64_t k = 0; k < rank; ++k) out[dst * rank + k] = b[src * rank + k];
      }
    }
  }
  return out;
}

TEST(PeftTest, SavesPeftNamesPermutedValuesAndConfigAndRoundTrips) {
  Generator gen(7);
  const StateDict tune = TinyAdapters(gen);
  StateDict with_base = tune;  // base weights in the dict are ignored
  with_base["layers.0.attn.q_proj.weight"] = ValueOrDie(Tensor::Zeros({24, 16}, DType::kF32));
  PeftAdapterConfig ac;
  ac.r = kRank;
  ac.lora_alpha = 6.0;
  ac.target_modules = LoRATargetModules(tune);
  EXPECT_EQ(ac.target_modules,
            (std::vector<std::string>{"k_proj", "output", "output_proj", "q_proj", "v_proj",
                                      "w1", "w2", "w3"}));
  ac.base_model_name_or_path = "meta-llama/Llama-3.2-1B";
  const std::string dir = OutDir("roundtrip");
  ASSERT_TRUE(SavePeftAdapter(dir, with_base, ac, TinyConfig()).ok());
  // The torchtune-named input too, for tools/golden/check_peft.py.
  ASSERT_TRUE(SaveSafetensors(dir + "/tune_adapters.safetensors", tune).ok());

  SafetensorsFile file = ValueOrDie(SafetensorsFile::Open(dir + "/adapter_model.safetensors"));
  EXPECT_EQ(file.Names().size(), tune.size());
  const std::string pre = "base_model.model.";
  const auto peft = [&](const std::string& n) { return ValueOrDie(file.Load(pre + n)); };
  // Names and shapes.
  EXPECT_EQ(peft("model.layers.0.self_attn.q_proj.lora_A.weight").shape(), (Shape{kRank, 16}));
  EXPECT_EQ(peft("model.layers.1.self_attn.k_proj.lora_B.weight").shape(), (Shape{12, kRank}));
  EXPECT_EQ(peft("model.layers.1.self_attn.o_proj.lora_B.weight").shape(), (Shape{16, kRank}));
  EXPECT_EQ(peft("model.layers.0.mlp.gate_proj.lora_B.weight").shape(), (Shape{20, kRank}));
  EXPECT_EQ(peft("model.layers.0.mlp.down_proj.lora_A.weight").shape(), (Shape{kRank, 20}));
  EXPECT_EQ(peft("model.layers.1.mlp.up_proj.lora_A.weight").shape(), (Shape{kRank, 16}));
  EXPECT_EQ(peft("lm_head.lora_B.weight").shape(), (Shape{11, kRank}));
  // Values: q/k lora_B permuted to HF's row order, everything else as is.
  EXPECT_EQ(F(peft("model.layers.0.self_attn.q_proj.lora_B.weight")),
            ExpectedHfRows(F(tune.at("layers.0.attn.q_proj.lora_b.weight")), 4, 6, kRank));
  EXPECT_EQ(F(peft("model.layers.1.self_attn.k_proj.lora_B.weight")),
            ExpectedHfRows(F(tune.at("layers.1.attn.k_proj.lora_b.weight")), 2, 6, kRank));
  EXPECT_NE(F(peft("model.layers.1.self_attn.k_proj.lora_B.weight")),
            F(tune.at("layers.1.attn.k_proj.lora_b.weight")));
  EXPECT_EQ(F(peft("model.layers.0.self_attn.q_proj.lora_A.weight")),
            F(tune.at("layers.0.attn.q_proj.lora_a.weight")));
  EXPECT_EQ(F(peft("model.layers.1.self_attn.v_proj.lora_B.weight")),
            F(tune.at("layers.1.attn.v_proj.lora_b.weight")));
  EXPECT_EQ(F(peft("lm_head.lora_A.weight")), F(tune.at("output.lora_a.weight")));

  // adapter_config.json.
  const nlohmann::json j =
      nlohmann::json::parse(ValueOrDie(ReadFileToString(dir + "/adapter_config.json")));
  EXPECT_EQ(j["peft_type"], "LORA");
  EXPECT_EQ(j["task_type"], "CAUSAL_LM");
  EXPECT_EQ(j["r"], kRank);
  EXPECT_EQ(j["lora_alpha"], 6.0);
  EXPECT_EQ(j["base_model_name_or_path"], "meta-llama/Llama-3.2-1B");
  EXPECT_EQ(j["target_modules"],
            nlohmann::json({"k_proj", "lm_head", "o_proj", "q_proj", "v_proj", "gate_proj",
                            "down_proj", "up_proj"}));

  // Round trip.
  const PeftAdapter back = ValueOrDie(LoadPeftAdapter(dir, TinyConfig()));
  EXPECT_EQ(back.config.r, kRank);
  EXPECT_EQ(back.config.lora_alpha, 6.0);
  EXPECT_EQ(back.config.target_modules, ac.target_modules);
  EXPECT_EQ(back.config.base_model_name_or_path, ac.base_model_name_or_path);
  ASSERT_EQ(back.state_dict.size(), tune.size());
  for (const auto& [name, t] : tune) {
    ASSERT_EQ(back.state_dict.count(name), 1u) << name;
    EXPECT_EQ(back.state_dict.at(name).shape(), t.shape()) << name;
    EXPECT_EQ(F(back.state_dict.at(name)), F(t)) << name;
  }
}

TEST(PeftTest, WithoutPermutationValuesPassThrough) {
  Generator gen(8);
  const StateDict tune = TinyAdapters(gen);
  PeftOptions o;
  o.permute_qk = false;
  const StateDict peft = ValueOrDie(TuneToPeftAdapterWeights(tune, TinyConfig(), o));
  EXPECT_EQ(F(peft.at("base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight")),
            F(tune.at("layers.0.attn.q_proj.lora_b.weight")));
  const StateDict back = ValueOrDie(PeftToTuneAdapterWeights(peft, TinyConfig(), o));
  EXPECT_EQ(F(back.at("layers.0.attn.q_proj.lora_b.weight")),
            F(tune.at("layers.0.attn.q_proj.lora_b.weight")));
}

TEST(PeftTest, RejectsBadInput) {
  Generator gen(9);
  const StateDict tune = TinyAdapters(gen);
  PeftAdapterConfig ac;
  ac.r = kRank + 1;  // disagrees with the tensors
  ac.target_modules = {"q_proj"};
  absl::Status st = SavePeftAdapter(OutDir("bad_rank"), tune, ac, TinyConfig());
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("lora_a"), std::string::npos) << st;
  ac.r = kRank;
  StateDict base_only;
  base_only["layers.0.attn.q_proj.weight"] = ValueOrDie(Tensor::Zeros({24, 16}, DType::kF32));
  EXPECT_FALSE(SavePeftAdapter(OutDir("empty"), base_only, ac, TinyConfig()).ok());
  ac.target_modules = {"gate_proj"};  // a PEFT name, not a torchtune one
  EXPECT_FALSE(PeftAdapterConfigJson(ac).ok());
  EXPECT_FALSE(ParsePeftAdapterConfig("{\"r\": 8}").ok());
  EXPECT_FALSE(ParsePeftAdapterConfig("[1, 2]").ok());
  EXPECT_EQ(ParsePeftAdapterConfig(
                "{\"r\": 8, \"lora_alpha\": 16, \"target_modules\": [], \"peft_type\": \"IA3\"}")
                .status()
                .code(),
            absl::StatusCode::kUnimplemented);
  StateDict bad_names;
  bad_names["model.layers.0.self_attn.q_proj.lora_A.weight"] = tune.begin()->second;
  EXPECT_FALSE(PeftToTuneAdapterWeights(bad_names, TinyConfig()).ok());
}

}  // namespace
}  // namespace cctune
