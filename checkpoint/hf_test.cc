#include "checkpoint/hf.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "checkpoint/llama2c.h"
#include "checkpoint/safetensors.h"
#include "core/random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/util/shared_dir.h"

namespace cctune {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using Json = nlohmann::json;

const std::string kAssets = "tests/assets/checkpoint";

// Scratch space; TEST_UNDECLARED_OUTPUTS_DIR when set, so the C++-written checkpoints can be
// checked with transformers afterwards (tools/golden/gen_checkpoint_fixtures.py --verify).
std::string OutDir(const std::string& name, bool keep = false) {
  const char* out = keep ? std::getenv("TEST_UNDECLARED_OUTPUTS_DIR") : nullptr;
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(out ? out : (tmp ? tmp : "/tmp"), "/hf_test_", name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::string CopyFixture(const std::string& fixture, const std::string& name) {
  const std::string dir = OutDir(name);
  for (const auto& e : fs::directory_iterator(kAssets + "/" + fixture)) {
    fs::copy_file(e.path(), dir + "/" + e.path().filename().string());
  }
  return dir;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteAll(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

std::string Msg(const absl::Status& s) { return std::string(s.message()); }

void ExpectBitEqual(const Tensor& got, const Tensor& want, const std::string& name) {
  ASSERT_TRUE(got.defined()) << name;
  ASSERT_EQ(got.dtype(), want.dtype()) << name;
  ASSERT_EQ(got.shape(), want.shape()) << name;
  Tensor g = ValueOrDie(got.Contiguous()), w = ValueOrDie(want.Contiguous());
  ASSERT_EQ(std::memcmp(g.raw_data(), w.raw_data(), g.nbytes()), 0) << name;
}

// Every tensor of `want` (a safetensors file) equals the state dict's, and nothing else is there.
void ExpectMatchesDump(const StateDict& sd, const std::string& dump, bool output_alias) {
  auto f = SafetensorsFile::Open(dump);
  ASSERT_TRUE(f.ok()) << f.status();
  size_t n = 0;
  for (const std::string& name : f->Names()) {
    ASSERT_EQ(sd.count(name), 1u) << "missing " << name;
    ExpectBitEqual(sd.at(name), ValueOrDie(f->Load(name)), name);
    ++n;
  }
  EXPECT_EQ(sd.size(), n + (output_alias ? 1 : 0));
}

TEST(HfTest, ParsesConfig) {
  auto c = ReadHfConfig(kAssets + "/tiny_llama");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model_type, "llama");
  EXPECT_EQ(c->vocab_size, 32);
  EXPECT_EQ(c->hidden_size, 16);
  EXPECT_EQ(c->intermediate_size, 24);
  EXPECT_EQ(c->num_hidden_layers, 2);
  EXPECT_EQ(c->num_attention_heads, 4);
  EXPECT_EQ(c->num_key_value_heads, 2);
  EXPECT_EQ(c->head_dim, 4);
  EXPECT_EQ(c->max_position_embeddings, 64);
  EXPECT_DOUBLE_EQ(c->rms_norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(c->rope_theta, 10000.0);
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_FALSE(c->qkv_bias);
  EXPECT_EQ(c->dtype, "float32");
  auto tied = ReadHfConfig(kAssets + "/tiny_llama_tied");
  ASSERT_TRUE(tied.ok());
  EXPECT_TRUE(tied->tie_word_embeddings);
  EXPECT_TRUE(tied->qkv_bias && tied->o_bias);
  // A config built in code serialises to one that parses back the same.
  HfModelConfig fresh;
  fresh.vocab_size = 512;
  fresh.hidden_size = 64;
  fresh.intermediate_size = 172;
  fresh.num_hidden_layers = 5;
  fresh.num_attention_heads = 8;
  fresh.num_key_value_heads = 4;
  fresh.head_dim = 8;
  fresh.tie_word_embeddings = true;
  auto text = fresh.ToJson();
  ASSERT_TRUE(text.ok()) << text.status();
  auto back = ParseHfConfig(*text);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->num_key_value_heads, 4);
  EXPECT_TRUE(back->tie_word_embeddings);
  EXPECT_EQ(back->architectures, std::vector<std::string>{"LlamaForCausalLM"});
}

TEST(HfTest, BadConfigs) {
  struct Case {
    std::string json;
    const char* expect;
  };
  const Case cases[] = {
      {"{", "not valid JSON"},
      {"[1]", "not an object"},
      {R"({"vocab_size":8,"intermediate_size":8,"num_hidden_layers":1,"num_attention_heads":2})",
       "missing \"hidden_size\""},
      {R"({"vocab_size":8,"hidden_size":"16","intermediate_size":8,"num_hidden_layers":1,)"
       R"("num_attention_heads":2})",
       "\"hidden_size\" must be an integer"},
      {R"({"vocab_size":8,"hidden_size":16,"intermediate_size":8,"num_hidden_layers":1,)"
       R"("num_attention_heads":4,"num_key_value_heads":3})",
       "num_attention_heads (4) must be divisible by num_key_value_heads (3)"},
      {R"({"vocab_size":8,"hidden_size":16,"intermediate_size":8,"num_hidden_layers":0,)"
       R"("num_attention_heads":4})",
       "sizes must be positive"},
      {R"({"vocab_size":8,"hidden_size":12,"intermediate_size":8,"num_hidden_layers":1,)"
       R"("num_attention_heads":4})",
       "head_dim (3) must be even"},
      {R"({"vocab_size":8,"hidden_size":16,"intermediate_size":8,"num_hidden_layers":1,)"
       R"("num_attention_heads":4,"tie_word_embeddings":"yes"})",
       "\"tie_word_embeddings\" must be true or false"},
  };
  for (const Case& c : cases) {
    auto parsed = ParseHfConfig(c.json, "cfg.json");
    ASSERT_FALSE(parsed.ok()) << c.json;
    EXPECT_THAT(Msg(parsed.status()), HasSubstr("cfg.json"));
    EXPECT_THAT(Msg(parsed.status()), HasSubstr(c.expect));
  }
  auto missing = LoadHfCheckpoint(OutDir("empty"));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Msg(missing.status()), HasSubstr("config.json"));
}

TEST(HfTest, NameMappingRoundTrips) {
  HfModelConfig c = ValueOrDie(ReadHfConfig(kAssets + "/tiny_llama"));
  c.qkv_bias = c.o_bias = c.mlp_bias = true;
  c.num_hidden_layers = 12;  // two-digit layer numbers
  auto expected = ExpectedTuneTensors(c, /*include_tied_output=*/true);
  ASSERT_TRUE(expected.ok());
  EXPECT_EQ(expected->size(), 1u + 12 * 16 + 2);
  for (const auto& [tune, shape] : *expected) {
    auto hf = TuneToHfName(tune);
    ASSERT_TRUE(hf.ok()) << hf.status();
    EXPECT_EQ(*HfToTuneName(*hf), tune);
  }
  EXPECT_EQ(*TuneToHfName("layers.11.attn.output_proj.weight"),
            "model.layers.11.self_attn.o_proj.weight");
  EXPECT_EQ(*TuneToHfName("layers.3.mlp.w1.weight"), "model.layers.3.mlp.gate_proj.weight");
  EXPECT_EQ(*TuneToHfName("layers.3.mlp.w3.weight"), "model.layers.3.mlp.up_proj.weight");
  EXPECT_EQ(*TuneToHfName("layers.3.mlp.w2.weight"), "model.layers.3.mlp.down_proj.weight");
  EXPECT_EQ(*TuneToHfName("layers.0.mlp_norm.scale"),
            "model.layers.0.post_attention_layernorm.weight");
  EXPECT_EQ(*TuneToHfName("output.weight"), "lm_head.weight");
  EXPECT_EQ(*HfToTuneName("model.layers.0.self_attn.rotary_emb.inv_freq"), "");
  for (const char* bad : {"model.layers.x.mlp.up_proj.weight", "model.layers.01.mlp.up_proj.weight",
                          "model.layers.0.mlp.up_proj.scale", "model.norm.bias", "lm_head",
                          "model.layers..self_attn.q_proj.weight"}) {
    EXPECT_EQ(HfToTuneName(bad).status().code(), absl::StatusCode::kNotFound) << bad;
  }
}

// fp64 RoPE, rotate_half style (HF): pairs (k, k + h/2).
std::vector<double> RopeHalf(const std::vector<double>& x, int pos, double base) {
  const size_t h = x.size(), half = h / 2;
  std::vector<double> out(h);
  for (size_t k = 0; k < half; ++k) {
    const double a = pos * std::pow(base, -2.0 * k / h);
    out[k] = x[k] * std::cos(a) - x[k + half] * std::sin(a);
    out[k + half] = x[k + half] * std::cos(a) + x[k] * std::sin(a);
  }
  return out;
}

// fp64 RoPE, interleaved (Meta / llama2.c / torchtune): pairs (2k, 2k + 1).
std::vector<double> RopeInterleaved(const std::vector<double>& x, int pos, double base) {
  const size_t h = x.size();
  std::vector<double> out(h);
  for (size_t k = 0; k < h / 2; ++k) {
    const double a = pos * std::pow(base, -2.0 * k / h);
    out[2 * k] = x[2 * k] * std::cos(a) - x[2 * k + 1] * std::sin(a);
    out[2 * k + 1] = x[2 * k + 1] * std::cos(a) + x[2 * k] * std::sin(a);
  }
  return out;
}

// Rows [h * h_d, (h + 1) * h_d) of W x, plus bias.
std::vector<double> HeadProj(const Tensor& w, const Tensor& b, const std::vector<double>& x,
                             int64_t head, int64_t hd) {
  std::vector<double> out(hd);
  const int64_t d = w.size(1);
  for (int64_t r = 0; r < hd; ++r) {
    double acc = b.data<float>()[head * hd + r];
    for (int64_t c = 0; c < d; ++c) acc += double(w.data<float>()[(head * hd + r) * d + c]) * x[c];
    out[r] = acc;
  }
  return out;
}

TEST(HfTest, PermutedWeightsGiveTheSameAttentionScoresWithInterleavedRope) {
  Generator gen(42);
  for (auto [n_h, n_kv, hd, d] : {std::tuple<int, int, int, int>{4, 2, 4, 16},
                                  {3, 1, 6, 7},
                                  {2, 2, 8, 5}}) {
    SCOPED_TRACE(absl::StrCat(n_h, " ", n_kv, " ", hd, " ", d));
    Tensor wq = ValueOrDie(RandomNormal({n_h * hd, d}, DType::kF32, gen));
    Tensor wk = ValueOrDie(RandomNormal({n_kv * hd, d}, DType::kF32, gen));
    Tensor bq = ValueOrDie(RandomNormal({n_h * hd}, DType::kF32, gen));
    Tensor bk = ValueOrDie(RandomNormal({n_kv * hd}, DType::kF32, gen));
    Tensor pwq = ValueOrDie(PermuteHfToInterleaved(wq, n_h, hd));
    Tensor pwk = ValueOrDie(PermuteHfToInterleaved(wk, n_kv, hd));
    Tensor pbq = ValueOrDie(PermuteHfToInterleaved(bq, n_h, hd));
    Tensor pbk = ValueOrDie(PermuteHfToInterleaved(bk, n_kv, hd));
    std::vector<double> xi(d), xj(d);
    for (auto& v : xi) v = gen.Normal();
    for (auto& v : xj) v = gen.Normal();
    const int pi = 5, pj = 2;
    for (int h = 0; h < n_h; ++h) {
      const int g = h / (n_h / n_kv);
      auto q1 = RopeHalf(HeadProj(wq, bq, xi, h, hd), pi, 10000.0);
      auto k1 = RopeHalf(HeadProj(wk, bk, xj, g, hd), pj, 10000.0);
      auto q2 = RopeInterleaved(HeadProj(pwq, pbq, xi, h, hd), pi, 10000.0);
      auto k2 = RopeInterleaved(HeadProj(pwk, pbk, xj, g, hd), pj, 10000.0);
      double s1 = 0, s2 = 0, s_unpermuted = 0;
      auto k3 = RopeInterleaved(HeadProj(wk, bk, xj, g, hd), pj, 10000.0);
      auto q3 = RopeInterleaved(HeadProj(wq, bq, xi, h, hd), pi, 10000.0);
      for (int r = 0; r < hd; ++r) {
        s1 += q1[r] * k1[r];
        s2 += q2[r] * k2[r];
        s_unpermuted += q3[r] * k3[r];
      }
      EXPECT_NEAR(s1, s2, 1e-9 * (1 + std::abs(s1)));
      // Without the permutation interleaved RoPE would give something else.
      EXPECT_GT(std::abs(s1 - s_unpermuted), 1e-6);
    }
    // The inverse undoes it exactly, for a non-contiguous bf16 input too.
    ExpectBitEqual(ValueOrDie(PermuteInterleavedToHf(pwq, n_h, hd)), wq, "wq");
    ExpectBitEqual(ValueOrDie(PermuteInterleavedToHf(pbk, n_kv, hd)), bk, "bk");
    Tensor wide = ValueOrDie(RandomNormal({d, n_h * hd}, DType::kBF16, gen));
    Tensor t = ValueOrDie(wide.Transpose(0, 1));
    ExpectBitEqual(
        ValueOrDie(PermuteInterleavedToHf(ValueOrDie(PermuteHfToInterleaved(t, n_h, hd)), n_h, hd)),
        t, "transposed");
  }
  Tensor w = ValueOrDie(Tensor::Zeros({12, 4}, DType::kF32));
  auto bad = PermuteHfToInterleaved(w, 4, 4);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(Msg(bad.status()), HasSubstr("expected [16] or [16, d]"));
  EXPECT_FALSE(PermuteHfToInterleaved(w, 4, 3).ok());
}

TEST(HfTest, LoadsSingleFileLikeTorchtune) {
  auto ck = LoadHfCheckpoint(kAssets + "/tiny_llama");
  ASSERT_TRUE(ck.ok()) << ck.status();
  EXPECT_EQ(ck->files.size(), 1u);
  EXPECT_EQ(ck->state_dict.size(), 1u + 2 * 9 + 2);
  ExpectMatchesDump(ck->state_dict, kAssets + "/tiny_llama_tune.safetensors", false);
  EXPECT_EQ(ck->state_dict.at("layers.1.attn.k_proj.weight").shape(), (Shape{8, 16}));
  // The fixture is meaningful: q really was permuted relative to the HF file.
  auto raw = SafetensorsFile::Open(kAssets + "/tiny_llama/model.safetensors");
  ASSERT_TRUE(raw.ok());
  Tensor hf_q = ValueOrDie(raw->Load("model.layers.0.self_attn.q_proj.weight"));
  const Tensor& q = ck->state_dict.at("layers.0.attn.q_proj.weight");
  EXPECT_NE(std::memcmp(hf_q.raw_data(), q.raw_data(), q.nbytes()), 0);
  // Tensors that need no permutation are zero-copy views on the mapped file.
  EXPECT_FALSE(ck->state_dict.at("layers.0.mlp.w1.weight").storage()->owned());
  EXPECT_TRUE(ck->state_dict.at("layers.0.attn.q_proj.weight").storage()->owned());
}

TEST(HfTest, LoadsShardedLikeSingle) {
  auto ck = LoadHfCheckpoint(kAssets + "/tiny_llama_sharded");
  ASSERT_TRUE(ck.ok()) << ck.status();
  EXPECT_EQ(ck->files.size(), 3u);
  ExpectMatchesDump(ck->state_dict, kAssets + "/tiny_llama_tune.safetensors", false);
}

TEST(HfTest, TiedEmbeddingsAndBiases) {
  auto ck = LoadHfCheckpoint(kAssets + "/tiny_llama_tied");
  ASSERT_TRUE(ck.ok()) << ck.status();
  ExpectMatchesDump(ck->state_dict, kAssets + "/tiny_llama_tied_tune.safetensors", true);
  EXPECT_EQ(ck->state_dict.at("output.weight").raw_data(),
            ck->state_dict.at("tok_embeddings.weight").raw_data());
  EXPECT_EQ(ck->state_dict.count("layers.0.attn.q_proj.bias"), 1u);
  HfLoadOptions no_alias;
  no_alias.alias_tied_output = false;
  auto plain = LoadHfCheckpoint(kAssets + "/tiny_llama_tied", no_alias);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->state_dict.count("output.weight"), 0u);
}

TEST(HfTest, OptionalPermuteAndDType) {
  HfLoadOptions opt;
  opt.permute_qk = false;
  auto ck = LoadHfCheckpoint(kAssets + "/tiny_llama", opt);
  ASSERT_TRUE(ck.ok()) << ck.status();
  auto raw = SafetensorsFile::Open(kAssets + "/tiny_llama/model.safetensors");
  ASSERT_TRUE(raw.ok());
  for (const std::string& name : raw->Names()) {
    ExpectBitEqual(ck->state_dict.at(ValueOrDie(HfToTuneName(name))), ValueOrDie(raw->Load(name)),
                   name);
  }
  HfLoadOptions bf;
  bf.dtype = DType::kBF16;
  auto half = LoadHfCheckpoint(kAssets + "/tiny_llama_sharded", bf);
  ASSERT_TRUE(half.ok()) << half.status();
  auto dump = SafetensorsFile::Open(kAssets + "/tiny_llama_tune.safetensors");
  for (const auto& [name, t] : half->state_dict) {
    ASSERT_EQ(t.dtype(), DType::kBF16) << name;
    Tensor want = ValueOrDie(dump->Load(name, DType::kBF16));
    ExpectBitEqual(t, want, name);
  }
}

TEST(HfTest, SaveReloadRoundTripIsExact) {
  auto ck = LoadHfCheckpoint(kAssets + "/tiny_llama");
  ASSERT_TRUE(ck.ok()) << ck.status();
  // Single file.
  const std::string single = OutDir("roundtrip_single", /*keep=*/true);
  ASSERT_TRUE(SaveHfCheckpoint(single, ck->state_dict, ck->config).ok());
  EXPECT_TRUE(fs::exists(single + "/model.safetensors"));
  EXPECT_FALSE(fs::exists(single + "/model.safetensors.index.json"));
  // The HF tensors on disk are exactly the ones transformers wrote.
  auto orig = SafetensorsFile::Open(kAssets + "/tiny_llama/model.safetensors");
  auto mine = SafetensorsFile::Open(single + "/model.safetensors");
  ASSERT_TRUE(orig.ok() && mine.ok());
  EXPECT_EQ(mine->Names(), orig->Names());
  EXPECT_EQ(mine->metadata().at("format"), "pt");
  for (const std::string& name : orig->Names()) {
    ExpectBitEqual(ValueOrDie(mine->Load(name)), ValueOrDie(orig->Load(name)), name);
  }
  auto back = LoadHfCheckpoint(single);
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectMatchesDump(back->state_dict, kAssets + "/tiny_llama_tune.safetensors", false);
  // Everything transformers wrote in config.json survives.
  Json a = Json::parse(ReadAll(kAssets + "/tiny_llama/config.json"));
  Json b = Json::parse(ReadAll(single + "/config.json"));
  for (auto it = a.begin(); it != a.end(); ++it) EXPECT_EQ(b[it.key()], it.value()) << it.key();

  // Sharded, 8 KB shards.
  const std::string sharded = OutDir("roundtrip_sharded", /*keep=*/true);
  HfSaveOptions small;
  small.max_shard_bytes = 8 * 1024;
  ASSERT_TRUE(SaveHfCheckpoint(sharded, ck->state_dict, ck->config, small).ok());
  Json index = Json::parse(ReadAll(sharded + "/model.safetensors.index.json"));
  EXPECT_EQ(index["metadata"]["total_size"].get<int64_t>(), 4944 * 4);
  std::set<std::string> shard_files;
  for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
    shard_files.insert(it.value().get<std::string>());
  }
  EXPECT_GE(shard_files.size(), 3u);
  for (const std::string& f : shard_files) {
    EXPECT_LE(fs::file_size(sharded + "/" + f), 8 * 1024 + 2048) << f;
  }
  auto back2 = LoadHfCheckpoint(sharded);
  ASSERT_TRUE(back2.ok()) << back2.status();
  ExpectMatchesDump(back2->state_dict, kAssets + "/tiny_llama_tune.safetensors", false);

  // Saving a single file into the sharded directory removes the stale shards.
  const std::string reused = OutDir("roundtrip_reused");
  ASSERT_TRUE(SaveHfCheckpoint(reused, ck->state_dict, ck->config, small).ok());
  ASSERT_TRUE(SaveHfCheckpoint(reused, ck->state_dict, ck->config).ok());
  int files = 0;
  for (const auto& e : fs::directory_iterator(reused)) {
    ++files;
    EXPECT_THAT(e.path().filename().string(), ::testing::AnyOf("config.json", "model.safetensors"));
  }
  EXPECT_EQ(files, 2);

  // bf16 on save: config.json follows.
  HfSaveOptions bf;
  bf.dtype = DType::kBF16;
  const std::string half = OutDir("roundtrip_bf16", /*keep=*/true);
  ASSERT_TRUE(SaveHfCheckpoint(half, ck->state_dict, ck->config, bf).ok());
  auto hc = ReadHfConfig(half);
  ASSERT_TRUE(hc.ok());
  EXPECT_EQ(hc->dtype, "bfloat16");
  auto hb = LoadHfCheckpoint(half);
  ASSERT_TRUE(hb.ok());
  EXPECT_EQ(hb->state_dict.at("norm.scale").dtype(), DType::kBF16);
}

TEST(HfTest, TiedSaveOmitsLmHead) {
  auto ck = LoadHfCheckpoint(kAssets + "/tiny_llama_tied");
  ASSERT_TRUE(ck.ok());
  const std::string dir = OutDir("roundtrip_tied", /*keep=*/true);
  ASSERT_TRUE(SaveHfCheckpoint(dir, ck->state_dict, ck->config).ok());
  auto f = SafetensorsFile::Open(dir + "/model.safetensors");
  ASSERT_TRUE(f.ok());
  EXPECT_FALSE(f->Contains("lm_head.weight"));
  auto orig = SafetensorsFile::Open(kAssets + "/tiny_llama_tied/model.safetensors");
  EXPECT_EQ(f->Names(), orig->Names());
  for (const std::string& name : orig->Names()) {
    ExpectBitEqual(ValueOrDie(f->Load(name)), ValueOrDie(orig->Load(name)), name);
  }
}

TEST(HfTest, MissingUnexpectedAndMisshapenTensorsAreNamed) {
  auto raw = SafetensorsFile::Open(kAssets + "/tiny_llama/model.safetensors");
  ASSERT_TRUE(raw.ok());
  const StateDict hf = ValueOrDie(raw->LoadAll());
  auto with = [&](const std::string& name, const std::function<void(StateDict&)>& edit) {
    const std::string dir = CopyFixture("tiny_llama", name);
    StateDict sd = hf;
    edit(sd);
    EXPECT_TRUE(SaveSafetensors(dir + "/model.safetensors", sd, {{"format", "pt"}}).ok());
    return LoadHfCheckpoint(dir);
  };
  auto missing = with("missing", [](StateDict& sd) {
    sd.erase("model.layers.1.mlp.up_proj.weight");
  });
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(Msg(missing.status()), HasSubstr("missing 'model.layers.1.mlp.up_proj.weight'"));
  EXPECT_THAT(Msg(missing.status()), HasSubstr("hf_test_missing"));
  auto unexpected = with("unexpected", [&](StateDict& sd) {
    sd["model.layers.0.self_attn.foo.weight"] = hf.at("model.norm.weight");
    sd["model.layers.7.input_layernorm.weight"] = hf.at("model.norm.weight");
  });
  ASSERT_FALSE(unexpected.ok());
  EXPECT_THAT(Msg(unexpected.status()), HasSubstr("'model.layers.0.self_attn.foo.weight'"));
  EXPECT_THAT(Msg(unexpected.status()), HasSubstr("'model.layers.7.input_layernorm.weight'"));
  auto misshapen = with("misshapen", [&](StateDict& sd) {
    sd["model.layers.0.self_attn.k_proj.weight"] =
        hf.at("model.layers.0.self_attn.q_proj.weight");
  });
  ASSERT_FALSE(misshapen.ok());
  EXPECT_THAT(Msg(misshapen.status()),
              HasSubstr("'model.layers.0.self_attn.k_proj.weight' is [16, 16], config says [8, 16]"));
  auto inv_freq = with("inv_freq", [&](StateDict& sd) {
    sd["model.layers.0.self_attn.rotary_emb.inv_freq"] = hf.at("model.norm.weight");
  });
  EXPECT_TRUE(inv_freq.ok()) << inv_freq.status();
  // Saving checks too.
  auto ck = LoadHfCheckpoint(kAssets + "/tiny_llama");
  StateDict sd = ck->state_dict;
  sd.erase("norm.scale");
  sd["layers.0.attn.q_proj.lora_a.weight"] = sd.at("layers.0.sa_norm.scale");
  auto s = SaveHfCheckpoint(OutDir("save_bad"), sd, ck->config);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(Msg(s), HasSubstr("missing 'norm.scale'"));
  EXPECT_THAT(Msg(s), HasSubstr("unexpected 'layers.0.attn.q_proj.lora_a.weight'"));
}

TEST(HfTest, InconsistentShardIndexIsRejected) {
  const std::string index_name = "model.safetensors.index.json";
  auto edit_index = [&](const std::string& name, const std::function<void(Json&)>& edit) {
    const std::string dir = CopyFixture("tiny_llama_sharded", name);
    Json index = Json::parse(ReadAll(dir + "/" + index_name));
    edit(index);
    WriteAll(dir + "/" + index_name, index.dump(2));
    return dir;
  };
  {
    const std::string dir = CopyFixture("tiny_llama_sharded", "shard_gone");
    fs::remove(dir + "/model-00002-of-00003.safetensors");
    auto ck = LoadHfCheckpoint(dir);
    ASSERT_FALSE(ck.ok());
    EXPECT_EQ(ck.status().code(), absl::StatusCode::kNotFound);
    EXPECT_THAT(Msg(ck.status()), HasSubstr("'model-00002-of-00003.safetensors'"));
    EXPECT_THAT(Msg(ck.status()), HasSubstr("does not exist"));
  }
  {
    const std::string dir = edit_index("wrong_shard", [](Json& j) {
      j["weight_map"]["lm_head.weight"] = "model-00001-of-00003.safetensors";
    });
    auto ck = LoadHfCheckpoint(dir);
    ASSERT_FALSE(ck.ok());
    EXPECT_THAT(Msg(ck.status()), HasSubstr("'lm_head.weight'"));
  }
  {
    const std::string dir = edit_index("unlisted", [](Json& j) {
      j["weight_map"].erase("model.norm.weight");
    });
    auto ck = LoadHfCheckpoint(dir);
    ASSERT_FALSE(ck.ok());
    EXPECT_THAT(Msg(ck.status()), HasSubstr("holds 'model.norm.weight', which"));
  }
  {
    const std::string dir = edit_index("traversal", [](Json& j) {
      j["weight_map"]["model.norm.weight"] = "../tiny_llama/model.safetensors";
    });
    auto ck = LoadHfCheckpoint(dir);
    ASSERT_FALSE(ck.ok());
    EXPECT_THAT(Msg(ck.status()), HasSubstr("expected a file name"));
  }
  {
    const std::string dir = edit_index("no_map", [](Json& j) { j.erase("weight_map"); });
    auto ck = LoadHfCheckpoint(dir);
    ASSERT_FALSE(ck.ok());
    EXPECT_THAT(Msg(ck.status()), HasSubstr("no \"weight_map\""));
  }
  {
    const std::string dir = CopyFixture("tiny_llama_sharded", "bad_json");
    WriteAll(dir + "/" + index_name, "{\"weight_map\": ");
    auto ck = LoadHfCheckpoint(dir);
    ASSERT_FALSE(ck.ok());
    EXPECT_THAT(Msg(ck.status()), HasSubstr("not a JSON object"));
  }
  {
    const std::string dir = CopyFixture("tiny_llama_sharded", "corrupt_shard");
    WriteAll(dir + "/model-00003-of-00003.safetensors", "garbage!garbage!");
    auto ck = LoadHfCheckpoint(dir);
    ASSERT_FALSE(ck.ok());
    EXPECT_THAT(Msg(ck.status()), HasSubstr("model-00003-of-00003.safetensors"));
  }
}

// stories260K (llama2.c, interleaved RoPE) -> HF (half-split) -> back: bit-exact. The saved
// directory is kept in TEST_UNDECLARED_OUTPUTS_DIR; by hand,
//   gen_checkpoint_fixtures.py --verify-stories DIR
// checks that transformers reproduces llama2.c's greedy tokens from it.
TEST(HfTest, Llama2cModelThroughHfRoundTrips) {
  auto path = testing::SharedFile("models/stories260K/stories260K.bin");
  if (!path.ok()) GTEST_SKIP() << path.status();
  Llama2cLoadOptions opt;
  opt.alias_tied_output = false;
  auto ck = LoadLlama2c(*path, opt);
  ASSERT_TRUE(ck.ok()) << ck.status();
  HfModelConfig c;
  c.vocab_size = ck->config.vocab_size;
  c.hidden_size = ck->config.dim;
  c.intermediate_size = ck->config.hidden_dim;
  c.num_hidden_layers = ck->config.n_layers;
  c.num_attention_heads = ck->config.n_heads;
  c.num_key_value_heads = ck->config.n_kv_heads;
  c.head_dim = ck->config.head_dim();
  c.max_position_embeddings = ck->config.seq_len;
  c.tie_word_embeddings = true;
  const std::string dir = OutDir("stories260K", /*keep=*/true);
  ASSERT_TRUE(SaveHfCheckpoint(dir, ck->state_dict, c).ok());
  auto saved = SafetensorsFile::Open(dir + "/model.safetensors");
  ASSERT_TRUE(saved.ok());
  EXPECT_EQ(saved->Names().size(), 1u + 5 * 9 + 1);
  EXPECT_FALSE(saved->Contains("lm_head.weight"));
  // HF's q rows are llama2.c's permuted: head h, half p, index j <- row h*8 + 2j + p.
  Tensor hf_q = ValueOrDie(saved->Load("model.layers.2.self_attn.q_proj.weight"));
  const Tensor& q = ck->state_dict.at("layers.2.attn.q_proj.weight");
  for (int h = 0; h < 8; ++h) {
    for (int p = 0; p < 2; ++p) {
      for (int j = 0; j < 4; ++j) {
        EXPECT_EQ(hf_q.data<float>()[(h * 8 + p * 4 + j) * 64 + 5],
                  q.data<float>()[(h * 8 + 2 * j + p) * 64 + 5]);
      }
    }
  }
  HfLoadOptions lopt;
  lopt.alias_tied_output = false;
  auto back = LoadHfCheckpoint(dir, lopt);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->state_dict.size(), ck->state_dict.size());
  for (const auto& [name, t] : ck->state_dict) {
    ExpectBitEqual(back->state_dict.at(name), t, name);
  }
}

}  // namespace
}  // namespace cctune
