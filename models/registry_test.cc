#include "models/registry.h"

#include <string>

#include "config/config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/model_test_util.h"
#include "modules/parameters.h"

namespace cctune {
namespace {

using ::testing::HasSubstr;

int64_t MetaCount(TransformerDecoder& m) {
  return ValueOrDie(ParameterArena::Create(m, DType::kBF16, Device::Meta())).NumParameters();
}

absl::StatusOr<std::unique_ptr<TransformerDecoder>> Build(
    const std::string& yaml, const ConfigNode& from_checkpoint = ConfigNode()) {
  CCTUNE_CHECK_OK(RegisterModelComponents());
  absl::StatusOr<Config> cfg = Config::FromString(yaml, "test.yaml");
  CCTUNE_CHECK_OK(cfg);
  return ModelComponentRegistry().InstantiateKey(cfg->root(), "model", from_checkpoint);
}

TEST(ModelRegistryTest, BothSpellingsBuildTheSameModel) {
  ASSERT_TRUE(RegisterModelComponents().ok());
  ASSERT_TRUE(RegisterModelComponents().ok());  // idempotent
  EXPECT_EQ(MetaCount(*ValueOrDie(BuildModel("torchtune.models.llama3_2.llama3_2_1b"))),
            1235814400);
  EXPECT_EQ(MetaCount(*ValueOrDie(BuildModel("cctune.models.llama3_2.llama3_2_1b"))), 1235814400);
  EXPECT_EQ(MetaCount(*ValueOrDie(BuildModel("cctune.models.llama3_1.llama3_1_8b"))), 8030261248);
}

// Every model builder builds without arguments; its lora_ twin with lora_attn_modules; every
// component builder is registered with its lora_ twin.
TEST(ModelRegistryTest, EveryBuiltinIsRegistered) {
  ASSERT_TRUE(RegisterModelComponents().ok());
  size_t presets = 0;
  ConfigNode lora = ConfigNode::Map();
  lora.Set("lora_attn_modules", ConfigNode::List({ConfigNode::String("q_proj")}));
  for (const ModelFamily& f : ValueOrDie(BuiltinModelFamilies())) {
    for (const ModelPreset& p : f.models) {
      const std::string name = absl::StrCat("cctune.models.", f.name, ".", p.name);
      auto m = BuildModel(name);
      ASSERT_TRUE(m.ok()) << name << ": " << m.status();
      EXPECT_GT(MetaCount(**m), 0) << name;
      auto l = BuildModel(absl::StrCat("torchtune.models.", f.name, ".lora_", p.name), lora);
      ASSERT_TRUE(l.ok()) << name << ": " << l.status();
      EXPECT_GT((*l)->NumParameters(), (*m)->NumParameters()) << name;
      ++presets;
    }
    if (f.component.empty()) continue;
    for (const char* prefix : {"", "lora_"}) {
      const std::string name =
          absl::StrCat("torchtune.models.", f.component, ".", prefix, f.component);
      EXPECT_TRUE(ModelComponentRegistry().Contains(name)) << name;
    }
  }
  EXPECT_EQ(presets, 18u);
  EXPECT_TRUE(ModelComponentRegistry().Contains("cctune.models.llama2c.llama2c"));
  EXPECT_TRUE(ModelComponentRegistry().Contains("torchtune.models.from_config_json"));
  EXPECT_TRUE(ModelComponentRegistry().Contains("cctune.models.lora_from_config_json"));
}

// Every model builder against the parameter and state-dict counts its family file publishes
// (torchtune's, or the model card's): built in bf16 on the meta device, names and shapes
// checked too (models/model_test_util.h).
TEST(ModelRegistryTest, ModelBuildersMatchTheirPublishedCounts) {
  int checked = 0;
  for (const ModelFamily& f : ValueOrDie(BuiltinModelFamilies())) {
    for (const ModelPreset& p : f.models) {
      if (p.published_parameters == 0) continue;
      SCOPED_TRACE(p.name);
      const DecoderConfig& c = p.config;
      testing::ExpectModel(BuildModel(absl::StrCat("torchtune.models.", f.name, ".", p.name)),
                           {p.published_parameters, static_cast<size_t>(p.published_tensors),
                            c.tie_word_embeddings, c.vocab_size, c.embed_dim, c.num_layers,
                            c.num_heads, c.num_kv_heads, c.intermediate_dim, c.qkv_bias});
      ++checked;
    }
  }
  EXPECT_EQ(checked, 17);
}

// What each family fixes beyond the sizes.
TEST(ModelRegistryTest, FamilySettings) {
  auto config = [](const char* name) { return ValueOrDie(ModelConfig(name)); };
  ASSERT_TRUE(RegisterModelComponents().ok());
  const DecoderConfig llama2 = config("cctune.models.llama2.llama2_7b");
  EXPECT_EQ(llama2.rope_base, 10000.0);
  EXPECT_EQ(llama2.intermediate_dim, ScaleHiddenDimForMlp(4096));  // not given: scaled
  EXPECT_FALSE(llama2.rope_scaling.has_value());

  const DecoderConfig llama3 = config("cctune.models.llama3.llama3_8b");
  EXPECT_EQ(llama3.rope_base, 500000.0);
  EXPECT_EQ(llama3.max_seq_len, 8192);
  EXPECT_FALSE(llama3.rope_scaling.has_value());

  for (const auto& [name, factor] :
       std::vector<std::pair<const char*, double>>{{"cctune.models.llama3_1.llama3_1_8b", 8.0},
                                                   {"cctune.models.llama3_2.llama3_2_1b", 32.0}}) {
    const DecoderConfig c = config(name);
    ASSERT_TRUE(c.rope_scaling.has_value()) << name;
    EXPECT_EQ(c.rope_scaling->factor, factor) << name;
    EXPECT_EQ(c.rope_scaling->original_max_position_embeddings, 8192) << name;
    EXPECT_EQ(c.max_seq_len, 131072) << name;
  }

  const DecoderConfig mistral = config("torchtune.models.mistral.mistral_7b");
  EXPECT_EQ(mistral.rope_pairing, ops::RopePairing::kInterleaved);
  EXPECT_EQ(mistral.norm_eps, 1e-5f);

  const DecoderConfig qwen = config("cctune.models.qwen2_5.qwen2_5_1_5b_instruct");
  EXPECT_EQ(qwen.rope_pairing, ops::RopePairing::kHalfSplit);
  EXPECT_TRUE(qwen.qkv_bias);
  EXPECT_EQ(qwen.norm_eps, 1e-6f);
  EXPECT_EQ(qwen.max_seq_len, 32768);
  EXPECT_EQ(config("cctune.models.qwen2_5.qwen2_5_1_5b_base").max_seq_len, 131072);
  EXPECT_FALSE(config("cctune.models.qwen2_5.qwen2_5_7b_base").tie_word_embeddings);
}

// torchtune's component builders with every argument: the same model as the model builder.
TEST(ModelRegistryTest, ComponentBuildersTakeTorchtunesArguments) {
  auto m = testing::BuildModelYaml(R"(_component_: torchtune.models.llama3_2.llama3_2
vocab_size: 128256
num_layers: 16
num_heads: 32
num_kv_heads: 8
embed_dim: 2048
max_seq_len: 131072
intermediate_dim: 8192
attn_dropout: 0.0
norm_eps: 1e-5
rope_base: 500000.0
scale_factor: 32
tie_word_embeddings: true
)");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(MetaCount(**m), 1235814400);
  // qwen2 with its q/k/v biases: Qwen 2.5 0.5B's numbers.
  m = testing::BuildModelYaml(R"(_component_: torchtune.models.qwen2.qwen2
vocab_size: 151936
num_layers: 24
num_heads: 14
num_kv_heads: 2
embed_dim: 896
intermediate_dim: 4864
max_seq_len: 32768
norm_eps: 1e-6
tie_word_embeddings: true
q_proj_bias: true
k_proj_bias: true
v_proj_bias: true
)");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(MetaCount(**m), 494032768);
  EXPECT_TRUE((*m)->layer(0).attn().v_proj().has_bias());
  // lora_ component builder.
  m = testing::BuildModelYaml(R"(_component_: torchtune.models.llama3_1.lora_llama3_1
lora_attn_modules: [q_proj, v_proj]
vocab_size: 128256
num_layers: 32
num_heads: 32
num_kv_heads: 8
embed_dim: 4096
max_seq_len: 131072
intermediate_dim: 14336
lora_rank: 8
lora_alpha: 16
apply_lora_to_mlp: true
apply_lora_to_output: true
)");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(MetaCount(**m), 8048883712);
}

TEST(ModelRegistryTest, ComponentBuilderErrorsNameTheKey) {
  const std::string llama3 =
      "_component_: torchtune.models.llama3.llama3\nvocab_size: 64\nnum_layers: 1\n"
      "num_heads: 4\nnum_kv_heads: 2\nembed_dim: 16\nmax_seq_len: 32\n";
  ASSERT_TRUE(testing::BuildModelYaml(llama3).ok());
  auto m = testing::BuildModelYaml(llama3 + "attn_dropout: 0.1\n");
  EXPECT_EQ(m.status().code(), absl::StatusCode::kUnimplemented) << m.status();
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("attn_dropout = 0.1"));
  m = testing::BuildModelYaml(llama3 + "tie_word_embeddings: true\n");  // not llama3's
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("'model.tie_word_embeddings'"));
  m = testing::BuildModelYaml(
      "_component_: torchtune.models.llama3.llama3\nvocab_size: 64\nnum_layers: 1\n");
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("num_heads"));  // required
  m = testing::BuildModelYaml(llama3 + "num_layers: 0\n");
  EXPECT_FALSE(m.ok());
  m = testing::BuildModelYaml(
      "_component_: torchtune.models.mistral.mistral\nvocab_size: 32000\nnum_layers: 2\n"
      "num_heads: 32\nnum_kv_heads: 6\nembed_dim: 4096\nintermediate_dim: 14336\n"
      "max_seq_len: 1024\n");
  EXPECT_THAT(std::string(m.status().message()),
              HasSubstr("num_heads (32) must be divisible by num_kv_heads (6)"));
  const std::string qwen2 =
      "_component_: torchtune.models.qwen2.qwen2\nvocab_size: 64\nnum_layers: 1\n"
      "num_heads: 4\nnum_kv_heads: 2\nembed_dim: 16\nintermediate_dim: 24\nmax_seq_len: 32\n";
  m = testing::BuildModelYaml(qwen2 + "k_proj_bias: false\n");
  EXPECT_EQ(m.status().code(), absl::StatusCode::kUnimplemented) << m.status();
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("k_proj_bias = 0"));
  m = testing::BuildModelYaml(qwen2 +
                              "q_proj_bias: false\nk_proj_bias: false\nv_proj_bias: false\n");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_FALSE((*m)->layer(0).attn().q_proj().has_bias());
  m = testing::BuildModelYaml(qwen2 + "q_norm: true\n");
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("q_norm"));
}

TEST(ModelRegistryTest, ModelBuilderArgumentsAreTyped) {
  ConfigNode untie = ConfigNode::Map();
  untie.Set("tie_word_embeddings", ConfigNode::Bool(false));
  auto untied = BuildModel("cctune.models.llama3_2.llama3_2_1b", untie);
  ASSERT_TRUE(untied.ok()) << untied.status();
  EXPECT_EQ(MetaCount(**untied), 1235814400 + 128256LL * 2048);
  auto m = testing::BuildModelYaml(
      "_component_: cctune.models.llama3_2.llama3_2_1b\ntie_word_embeddings: false\n");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(MetaCount(**m), 1235814400 + 128256LL * 2048);
  m = testing::BuildModelYaml(
      "_component_: cctune.models.llama3_2.llama3_2_1b\ntie_word_embeddings: yes please\n");
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("tie_word_embeddings"));
  m = testing::BuildModelYaml("_component_: cctune.models.llama3_1.llama3_1_8b\nvocab: 3\n");
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("unknown key"));
}

TEST(ModelRegistryTest, KeysAreBuilderArguments) {
  auto m = Build(
      "model:\n  _component_: torchtune.models.tiny.tiny_llama\n  num_layers: 3\n"
      "  embed_dim: 32\n  num_kv_heads: 4\n  tie_word_embeddings: True\n");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->num_layers(), 3u);
  EXPECT_EQ((*m)->embed_dim(), 32);
  EXPECT_EQ((*m)->layer(0).attn().num_kv_heads(), 4);
}

TEST(ModelRegistryTest, CheckpointArgumentsFillMissingKeys) {
  ConfigNode header = ConfigNode::Map();
  for (const auto& [key, value] : std::vector<std::pair<std::string, int64_t>>{{"dim", 64},
                                                                               {"hidden_dim", 172},
                                                                               {"n_layers", 5},
                                                                               {"n_heads", 8},
                                                                               {"n_kv_heads", 4},
                                                                               {"vocab_size", 512},
                                                                               {"seq_len", 512},
                                                                               {"not_an_arg", 1}}) {
    header.Set(key, ConfigNode::Int(value));
  }
  auto m = Build("model:\n  _component_: cctune.models.llama2c.llama2c\n", header);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->num_layers(), 5u);
  EXPECT_EQ((*m)->vocab_size(), 512);
  EXPECT_EQ(MetaCount(**m), 260032);
  // An explicit key wins over the checkpoint's.
  m = Build("model:\n  _component_: cctune.models.llama2c.llama2c\n  seq_len: 128\n", header);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->max_seq_len(), 128);
  // Without the checkpoint the builder reports the missing arguments.
  m = Build("model:\n  _component_: cctune.models.llama2c.llama2c\n  dim: 64\n");
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(std::string(m.status().message()),
              HasSubstr("missing required argument(s) hidden_dim"));
}

TEST(ModelRegistryTest, Errors) {
  auto m = Build("model:\n  _component_: cctune.models.tiny.tiny_llama\n  num_layer: 3\n");
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(std::string(m.status().message()),
              HasSubstr("test.yaml:3: key 'model.num_layer': unknown key"));
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("num_layers"));
  m = Build("model:\n  _component_: cctune.models.tiny.tiny_llama\n  num_layers: [1, 2]\n");
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("expected int"));
  m = Build("model:\n  _component_: cctune.models.tiny.tiny_llama\n  num_layers: abc\n");
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("abc"));
  m = Build("model:\n  _component_: cctune.models.tiny.tiny_llama\n  num_layers: 0\n");
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("num_layers"));
  m = Build("model:\n  _component_: cctune.models.llama9.llama9_1b\n");
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("llama9_1b"));
}

// Family files are checked key by key; each error names the file and line.
TEST(ModelFamilyTest, FamilyFilesAreChecked) {
  const std::string head =
      "family: f\ncomponent: f\ndoc: F\nrequired: [vocab_size, num_layers, num_heads, "
      "num_kv_heads, embed_dim, max_seq_len]\n";
  const std::string call =
      "    call: {vocab_size: 8, num_layers: 1, num_heads: 2, num_kv_heads: 1, embed_dim: 8, "
      "max_seq_len: 16}\n";
  ModelFamily f = ValueOrDie(ParseModelFamily(
      head +
          "defaults: {norm_eps: 1.0e-6}\nfixed: {rope_pairing: half_split}\nmodels:\n  f_1:\n"
          "    doc: one\n    args: [norm_eps]\n" +
          call,
      "f.yaml"));
  EXPECT_EQ(f.optional_args, std::vector<std::string>{"norm_eps"});
  EXPECT_EQ(f.defaults.rope_pairing, ops::RopePairing::kHalfSplit);
  ASSERT_EQ(f.models.size(), 1u);
  EXPECT_EQ(f.models[0].config.norm_eps, 1e-6f);
  EXPECT_EQ(f.models[0].config.intermediate_dim, ScaleHiddenDimForMlp(8));
  EXPECT_EQ(f.models[0].config.rope_pairing, ops::RopePairing::kHalfSplit);
  struct Case {
    std::string yaml;
    std::string message;
  };
  const Case cases[] = {
      {head + "defaults: {norm_epsilon: 1.0}\nmodels: {}\n",
       "f.yaml:5: key 'defaults.norm_epsilon': 'norm_epsilon' is not an argument here"},
      {head + "defaults: {norm_eps: -1.0}\nmodels: {}\n", "'norm_eps': must be > 0"},
      {head + "defaults: {num_layers: x}\nmodels: {}\n", "'num_layers': expected int"},
      {"family: f\ndoc: F\nrequired: [vocab]\nmodels: {}\n", "f.yaml:3"},
      {head + "models:\n  f_1:\n    doc: one\n    call: {vocab_size: 8}\n",
       "model builder 'f_1' must give 'num_layers'"},
      {head + "models:\n  f_1:\n    doc: one\n    args: [rope_base]\n" + call,
       "'rope_base' is not an argument of f"},
      {head + "models:\n  f_1:\n    dok: one\n" + call, "dok"},
      {head, "models"},
  };
  for (const Case& c : cases) {
    auto r = ParseModelFamily(c.yaml, "f.yaml");
    ASSERT_FALSE(r.ok()) << c.yaml;
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(c.message)) << c.yaml;
  }
}

}  // namespace
}  // namespace cctune
