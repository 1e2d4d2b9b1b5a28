#include "models/hf_config/hf_config.h"

#include <fstream>
#include <string>

#include "checkpoint/hf.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/lora.h"
#include "models/registry.h"
#include "modules/parameters.h"
#include "tests/subprocess.h"

namespace cctune {
namespace {

using ::testing::HasSubstr;

std::string Fixture(const std::string& dir) { return testing::RunfilePath("tests/assets/" + dir); }

// A config.json with the given fields over a small llama.
std::string Json(const std::string& model_type, const std::string& extra = "") {
  return R"({"model_type": ")" + model_type + R"(", "hidden_size": 64, "num_hidden_layers": 2,
    "num_attention_heads": 8, "num_key_value_heads": 2, "intermediate_size": 96,
    "vocab_size": 100, "max_position_embeddings": 128, "rms_norm_eps": 1e-06,
    "rope_theta": 500000.0)" +
         extra + "}";
}

ConfigNode Args(std::vector<std::pair<std::string, ConfigNode>> entries) {
  ConfigNode n = ConfigNode::Map();
  for (auto& [k, v] : entries) n.Set(k, std::move(v));
  return n;
}

// The checkpoint fixture: its config.json builds a model whose parameters are exactly the
// checkpoint's tensors (strict load), from `path` or from the checkpointer's checkpoint_dir.
TEST(HfConfigTest, TinyCheckpointLoadsIntoItsConfigsModel) {
  const std::string dir = Fixture("checkpoint/tiny_llama");
  DecoderConfig c = ValueOrDie(ReadHfDecoderConfig(dir));
  EXPECT_EQ(c.vocab_size, 32);
  EXPECT_EQ(c.embed_dim, 16);
  EXPECT_EQ(c.num_layers, 2);
  EXPECT_EQ(c.num_heads, 4);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 4);
  EXPECT_EQ(c.intermediate_dim, 24);
  EXPECT_EQ(c.max_seq_len, 64);
  EXPECT_EQ(c.rope_base, 10000.0);  // from rope_parameters
  EXPECT_FALSE(c.tie_word_embeddings);
  HfCheckpoint ck = ValueOrDie(LoadHfCheckpoint(dir));
  for (const ConfigNode& from_checkpoint :
       {Args({}), Args({{"checkpoint_dir", ConfigNode::String(dir)}})}) {
    const ConfigNode args = from_checkpoint.size() == 0
                                ? Args({{"path", ConfigNode::String(dir + "/config.json")}})
                                : ConfigNode();
    auto model = ValueOrDie(BuildModel("cctune.models.from_config_json", args, from_checkpoint));
    auto arena = ValueOrDie(ParameterArena::Create(*model, DType::kF32, Device::Cpu()));
    ASSERT_TRUE(arena.LoadStateDict(ck.state_dict, /*strict=*/true).ok());
  }
  // The demo model's config.
  auto demo = ValueOrDie(BuildModel("torchtune.models.from_config_json",
                                    Args({{"path", ConfigNode::String(Fixture("demo"))}})));
  EXPECT_EQ(demo->num_layers(), 4u);
  EXPECT_EQ(demo->vocab_size(), 264);
  EXPECT_EQ(demo->layer(0).attn().num_kv_heads(), 2);
  // max_seq_len overrides max_position_embeddings; the LoRA twin adds adapters.
  auto lora = ValueOrDie(
      BuildModel("cctune.models.lora_from_config_json",
                 Args({{"path", ConfigNode::String(dir)},
                       {"max_seq_len", ConfigNode::Int(32)},
                       {"lora_attn_modules", ConfigNode::List({ConfigNode::String("q_proj")})},
                       {"lora_rank", ConfigNode::Int(2)}})));
  EXPECT_EQ(lora->max_seq_len(), 32);
  EXPECT_EQ(NumLoRAParameters(*lora), 2 * 2 * (16 + 16));
  // The checkpointer's q/k layout must fit the config's RoPE pairs.
  auto qwen_loaded = BuildModel("cctune.models.from_config_json", ConfigNode(),
                                Args({{"checkpoint_dir", ConfigNode::String(dir)},
                                      {"checkpoint_model_type", ConfigNode::String("QWEN2")}}));
  EXPECT_THAT(std::string(qwen_loaded.status().message()),
              HasSubstr("set checkpointer.model_type to LLAMA3"));
  EXPECT_TRUE(BuildModel("cctune.models.from_config_json", ConfigNode(),
                         Args({{"checkpoint_dir", ConfigNode::String(dir)},
                               {"checkpoint_model_type", ConfigNode::String("LLAMA3")}}))
                  .ok());
  auto none = BuildModel("cctune.models.from_config_json");
  EXPECT_THAT(std::string(none.status().message()), HasSubstr("checkpoint_dir"));
}

TEST(HfConfigTest, ModelTypesAndTheirFields) {
  DecoderConfig llama = ValueOrDie(DecoderConfigFromHfJson(Json("llama", R"(,
    "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                     "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
    "tie_word_embeddings": true, "head_dim": 16, "hidden_act": "silu")")));
  ASSERT_TRUE(llama.rope_scaling.has_value());
  EXPECT_EQ(llama.rope_scaling->factor, 32.0);
  EXPECT_EQ(llama.rope_scaling->original_max_position_embeddings, 8192);
  EXPECT_EQ(llama.rope_base, 500000.0);
  EXPECT_EQ(llama.norm_eps, 1e-6f);
  EXPECT_EQ(llama.head_dim, 16);
  EXPECT_TRUE(llama.tie_word_embeddings);
  EXPECT_FALSE(llama.qkv_bias);
  EXPECT_EQ(llama.rope_pairing, ops::RopePairing::kInterleaved);
  EXPECT_TRUE(BuildDecoder(llama).ok());

  DecoderConfig qwen = ValueOrDie(DecoderConfigFromHfJson(
      Json("qwen2", R"(, "use_sliding_window": false, "sliding_window": 32)")));
  EXPECT_TRUE(qwen.qkv_bias);
  EXPECT_EQ(qwen.rope_pairing, ops::RopePairing::kHalfSplit);
  EXPECT_FALSE(qwen.rope_scaling.has_value());
  auto qm = ValueOrDie(BuildDecoder(qwen));
  EXPECT_TRUE(qm->layer(1).attn().k_proj().has_bias());
  EXPECT_FALSE(qm->layer(1).attn().output_proj().has_bias());

  // A sliding window no shorter than the context is plain attention.
  const std::string mistral = Json("mistral", R"(, "sliding_window": 64)");
  absl::StatusOr<DecoderConfig> m = DecoderConfigFromHfJson(mistral, "m/config.json");
  EXPECT_EQ(m.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(m.status().message()),
              HasSubstr("m/config.json: \"sliding_window\" = 64"));
  EXPECT_TRUE(DecoderConfigFromHfJson(mistral, "m/config.json", /*max_seq_len=*/64).ok());
  EXPECT_TRUE(DecoderConfigFromHfJson(Json("mistral", R"(, "sliding_window": null)")).ok());
}

TEST(HfConfigTest, UnsupportedValuesAreNamed) {
  struct Case {
    std::string json;
    std::string message;
  };
  const Case cases[] = {
      {Json("gemma"), "\"model_type\" = \"gemma\""},
      {Json("llama", R"(, "rope_scaling": {"type": "yarn", "factor": 4.0})"),
       "\"rope_scaling.type\" = \"yarn\""},
      {Json("llama", R"(, "rope_scaling": {"rope_type": "linear", "factor": 4.0})"),
       "\"rope_scaling.rope_type\" = \"linear\""},
      {Json("llama", R"(, "hidden_act": "gelu")"), "\"hidden_act\" = \"gelu\""},
      {Json("llama", R"(, "attention_bias": true)"), "\"attention_bias\" = true"},
      {Json("llama", R"(, "mlp_bias": true)"), "\"mlp_bias\" = true"},
      {Json("llama", R"(, "vocab_size": 1.5)"), "\"vocab_size\""},
      {R"({"model_type": "llama", "vocab_size": 10})", "missing \"hidden_size\""},
      {R"({"hidden_size": 10})", "missing \"model_type\""},
      {"[1, 2]", "not a JSON object"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<DecoderConfig> r = DecoderConfigFromHfJson(c.json, "x/config.json");
    ASSERT_FALSE(r.ok()) << c.json;
    EXPECT_THAT(std::string(r.status().message()), HasSubstr("x/config.json")) << c.json;
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(c.message)) << c.json;
  }
  EXPECT_THAT(std::string(ReadHfDecoderConfig("/nonexistent/dir").status().message()),
              HasSubstr("/nonexistent/dir"));
}

}  // namespace
}  // namespace cctune
