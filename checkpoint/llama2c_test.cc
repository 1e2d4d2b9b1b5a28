#include "checkpoint/llama2c.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/shared_dir.h"

namespace cctune {
namespace {

using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return absl::StrCat(tmp ? tmp : "/tmp", "/llama2c_test_", name);
}

// Reads one float at byte offset `off` with plain stdio.
float FreadFloat(const std::string& path, long off) {
  FILE* f = std::fopen(path.c_str(), "rb");
  EXPECT_NE(f, nullptr);
  float v = NAN;
  EXPECT_EQ(std::fseek(f, off, SEEK_SET), 0);
  EXPECT_EQ(std::fread(&v, 4, 1, f), 1u);
  std::fclose(f);
  return v;
}

float At(const Tensor& t, int64_t r, int64_t c) {
  return t.data<float>()[r * t.stride(0) + c * t.stride(1)];
}

TEST(Llama2cTest, LoadsStories260K) {
  auto path = testing::SharedFile("models/stories260K/stories260K.bin");
  if (!path.ok()) GTEST_SKIP() << path.status();
  auto ck = LoadLlama2c(*path);
  ASSERT_TRUE(ck.ok()) << ck.status();
  const Llama2cHeader& c = ck->config;
  EXPECT_EQ(c.dim, 64);
  EXPECT_EQ(c.hidden_dim, 172);
  EXPECT_EQ(c.n_layers, 5);
  EXPECT_EQ(c.n_heads, 8);
  EXPECT_EQ(c.n_kv_heads, 4);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.seq_len, 512);
  EXPECT_TRUE(c.shared_classifier);
  EXPECT_EQ(c.head_dim(), 8);
  EXPECT_EQ(c.ExpectedFileBytes(), 1056540);

  const StateDict& sd = ck->state_dict;
  EXPECT_EQ(sd.size(), 1u + 5 * 9 + 1 + 1);
  const std::map<std::string, Shape> shapes = {
      {"tok_embeddings.weight", {512, 64}},   {"layers.0.sa_norm.scale", {64}},
      {"layers.4.attn.q_proj.weight", {64, 64}}, {"layers.2.attn.k_proj.weight", {32, 64}},
      {"layers.3.attn.v_proj.weight", {32, 64}}, {"layers.1.attn.output_proj.weight", {64, 64}},
      {"layers.0.mlp_norm.scale", {64}},      {"layers.4.mlp.w1.weight", {172, 64}},
      {"layers.4.mlp.w2.weight", {64, 172}},  {"layers.0.mlp.w3.weight", {172, 64}},
      {"norm.scale", {64}},                   {"output.weight", {512, 64}}};
  for (const auto& [name, shape] : shapes) {
    ASSERT_EQ(sd.count(name), 1u) << name;
    EXPECT_EQ(sd.at(name).shape(), shape) << name;
    EXPECT_EQ(sd.at(name).dtype(), DType::kF32);
  }
  // Tied classifier: the same tensor, no copy.
  EXPECT_EQ(sd.at("output.weight").raw_data(), sd.at("tok_embeddings.weight").raw_data());

  // Spot checks against offsets computed here, in floats after the 7-int header, written out
  // section by section as llama2.c's memory_map_weights walks them.
  const long d = 64, h = 172, L = 5, kv = 32, v = 512;
  const long emb = 7;
  const long rms_att = emb + v * d;
  const long wq = rms_att + L * d;
  const long wk = wq + L * d * d;
  const long wv = wk + L * kv * d;
  const long wo = wv + L * kv * d;
  const long rms_ffn = wo + L * d * d;
  const long w1 = rms_ffn + L * d;
  const long w2 = w1 + L * h * d;
  const long w3 = w2 + L * d * h;
  const long rms_final = w3 + L * h * d;
  const long freq_real = rms_final + d;
  struct Probe {
    const char* name;
    long base;  // float index of this layer's matrix
    int64_t r, c;
    long cols;
  };
  const Probe probes[] = {
      {"tok_embeddings.weight", emb, 511, 63, d},
      {"tok_embeddings.weight", emb, 3, 17, d},
      {"layers.0.attn.q_proj.weight", wq, 5, 9, d},
      {"layers.3.attn.q_proj.weight", wq + 3 * d * d, 63, 1, d},
      {"layers.1.attn.k_proj.weight", wk + 1 * kv * d, 31, 62, d},
      {"layers.4.attn.v_proj.weight", wv + 4 * kv * d, 7, 0, d},
      {"layers.2.attn.output_proj.weight", wo + 2 * d * d, 10, 11, d},
      {"layers.4.mlp.w1.weight", w1 + 4 * h * d, 171, 63, d},
      {"layers.1.mlp.w2.weight", w2 + 1 * d * h, 63, 171, h},
      {"layers.2.mlp.w2.weight", w2 + 2 * d * h, 0, 100, h},
      {"layers.3.mlp.w3.weight", w3 + 3 * h * d, 100, 5, d},
  };
  for (const Probe& p : probes) {
    const float want = FreadFloat(*path, 4 * (p.base + p.r * p.cols + p.c));
    EXPECT_EQ(At(sd.at(p.name), p.r, p.c), want) << p.name << "[" << p.r << ", " << p.c << "]";
  }
  EXPECT_EQ(sd.at("layers.2.sa_norm.scale").data<float>()[7],
            FreadFloat(*path, 4 * (rms_att + 2 * d + 7)));
  EXPECT_EQ(sd.at("layers.4.mlp_norm.scale").data<float>()[63],
            FreadFloat(*path, 4 * (rms_ffn + 4 * d + 63)));
  EXPECT_EQ(sd.at("norm.scale").data<float>()[0], FreadFloat(*path, 4 * rms_final));
  // The offsets above are right if the legacy RoPE table sits where they say:
  // freq_cis_real[pos][i] = cos(pos * 10000^(-2i/h_d)).
  for (int pos : {1, 3, 200}) {
    for (int i : {0, 1, 3}) {
      const double want = std::cos(pos * std::pow(10000.0, -2.0 * i / 8));
      EXPECT_NEAR(FreadFloat(*path, 4 * (freq_real + pos * 4 + i)), want, 1e-4);
    }
  }
  // Weights are real, not zeros.
  double sum_sq = 0;
  const Tensor& w = sd.at("layers.0.attn.q_proj.weight");
  for (int64_t i = 0; i < w.numel(); ++i) sum_sq += w.data<float>()[i] * w.data<float>()[i];
  EXPECT_GT(sum_sq, 1.0);

  Llama2cLoadOptions no_alias;
  no_alias.alias_tied_output = false;
  auto untied = LoadLlama2c(*path, no_alias);
  ASSERT_TRUE(untied.ok());
  EXPECT_EQ(untied->state_dict.count("output.weight"), 0u);
}

TEST(Llama2cTest, TruncatedOrPaddedCopiesAreRejected) {
  auto path = testing::SharedFile("models/stories260K/stories260K.bin");
  if (!path.ok()) GTEST_SKIP() << path.status();
  std::ifstream in(*path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string bytes = ss.str();
  for (size_t n : {size_t{0}, size_t{10}, size_t{28}, size_t{4096}, bytes.size() - 4,
                   bytes.size() - 1, bytes.size() + 4}) {
    const std::string copy = TempPath(absl::StrCat("cut", n));
    std::string data = bytes.substr(0, n);
    if (n > bytes.size()) data += std::string(n - bytes.size(), '\0');
    std::ofstream(copy, std::ios::binary).write(data.data(), data.size());
    auto ck = LoadLlama2c(copy);
    ASSERT_FALSE(ck.ok()) << n;
    const std::string msg(ck.status().message());
    EXPECT_THAT(msg, HasSubstr(copy));
    if (n >= 28) {
      EXPECT_THAT(msg, HasSubstr("implies 1056540 bytes but the file has " + std::to_string(n)));
    } else {
      EXPECT_THAT(msg, HasSubstr("too short"));
    }
  }
}

// Writes a llama2.c file from a header and the named sections (in order), returns the path.
std::string WriteModel(const std::string& name, const std::vector<int32_t>& header,
                       const std::vector<std::vector<float>>& sections) {
  const std::string path = TempPath(name);
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(header.data()), 4 * header.size());
  for (const auto& s : sections) out.write(reinterpret_cast<const char*>(s.data()), 4 * s.size());
  return path;
}

TEST(Llama2cTest, UnsharedClassifierSyntheticModel) {
  // dim 8, hidden 12, 2 layers, 2 heads of 4, 1 kv head, vocab 10 (unshared), seq_len 3.
  const int d = 8, h = 12, L = 2, kv = 4, v = 10, seq = 3;
  Generator gen(33);
  auto rnd = [&](size_t n) {
    std::vector<float> x(n);
    for (float& f : x) f = static_cast<float>(gen.Normal());
    return x;
  };
  const std::vector<std::vector<float>> sec = {
      rnd(v * d),      rnd(L * d),     rnd(L * d * d), rnd(L * kv * d), rnd(L * kv * d),
      rnd(L * d * d),  rnd(L * d),     rnd(L * h * d), rnd(L * d * h),  rnd(L * h * d),
      rnd(d),          rnd(seq * 2),   rnd(seq * 2),   rnd(v * d)};
  const std::string path = WriteModel("unshared", {d, h, L, 2, 1, -v, seq}, sec);
  auto ck = LoadLlama2c(path);
  ASSERT_TRUE(ck.ok()) << ck.status();
  EXPECT_FALSE(ck->config.shared_classifier);
  EXPECT_EQ(ck->config.vocab_size, v);
  const StateDict& sd = ck->state_dict;
  auto expect_eq = [&](const std::string& name, const std::vector<float>& s, size_t offset,
                       Shape shape) {
    SCOPED_TRACE(name);
    ASSERT_EQ(sd.count(name), 1u);
    const Tensor& t = sd.at(name);
    ASSERT_EQ(t.shape(), shape);
    for (int64_t i = 0; i < t.numel(); ++i) ASSERT_EQ(t.data<float>()[i], s[offset + i]) << i;
  };
  expect_eq("tok_embeddings.weight", sec[0], 0, {v, d});
  for (int l = 0; l < L; ++l) {
    const std::string p = absl::StrCat("layers.", l, ".");
    expect_eq(p + "sa_norm.scale", sec[1], l * d, {d});
    expect_eq(p + "attn.q_proj.weight", sec[2], l * d * d, {d, d});
    expect_eq(p + "attn.k_proj.weight", sec[3], l * kv * d, {kv, d});
    expect_eq(p + "attn.v_proj.weight", sec[4], l * kv * d, {kv, d});
    expect_eq(p + "attn.output_proj.weight", sec[5], l * d * d, {d, d});
    expect_eq(p + "mlp_norm.scale", sec[6], l * d, {d});
    expect_eq(p + "mlp.w1.weight", sec[7], l * h * d, {h, d});
    expect_eq(p + "mlp.w2.weight", sec[8], l * d * h, {d, h});
    expect_eq(p + "mlp.w3.weight", sec[9], l * h * d, {h, d});
  }
  expect_eq("norm.scale", sec[10], 0, {d});
  expect_eq("output.weight", sec[13], 0, {v, d});
  EXPECT_EQ(sd.size(), 1u + L * 9 + 2);
  // Weights are views on the mapping and may be modified in place (privately).
  Tensor w = sd.at("layers.1.mlp.w2.weight");
  w.data<float>()[0] = 123.f;
  auto again = LoadLlama2c(path);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->state_dict.at("layers.1.mlp.w2.weight").data<float>()[0], sec[8][d * h]);
}

TEST(Llama2cTest, BadHeadersAreRejected) {
  struct Case {
    std::vector<int32_t> header;
    const char* expect;
  };
  const Case cases[] = {
      {{0, 12, 2, 2, 1, 10, 3}, "non-zero"},
      {{8, 12, 2, 2, 1, 0, 3}, "non-zero"},
      {{8, 12, -2, 2, 1, 10, 3}, "non-zero"},
      {{8, 12, 2, 3, 1, 10, 3}, "dim (8) must be divisible by n_heads (3)"},
      {{8, 12, 2, 4, 3, 10, 3}, "n_heads (4) must be a multiple of n_kv_heads (3)"},
      {{8, 12, 2, 8, 8, 10, 3}, "head size (1) must be even"},
      {{8, 12, 2, 2, 4, 10, 3}, "must be a multiple of n_kv_heads"},
      {{8, 12, 2, 2, 1, INT32_MIN, 3}, "non-zero"},
      {{1 << 30, 12, 2, 2, 1, 10, 3}, "implausibly large"},
  };
  for (const Case& c : cases) {
    const std::string path = WriteModel("bad", c.header, {std::vector<float>(64, 0.5f)});
    auto ck = LoadLlama2c(path);
    ASSERT_FALSE(ck.ok());
    EXPECT_THAT(std::string(ck.status().message()), HasSubstr(c.expect));
    EXPECT_THAT(std::string(ck.status().message()), HasSubstr(path));
  }
  EXPECT_EQ(LoadLlama2c(TempPath("missing")).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace cctune
