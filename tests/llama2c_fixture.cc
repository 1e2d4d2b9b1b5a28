#include "tests/llama2c_fixture.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/random.h"

namespace cctune {
namespace testing {

namespace {

void PutInt(std::ofstream& f, int32_t v) { f.write(reinterpret_cast<const char*>(&v), 4); }
void PutFloat(std::ofstream& f, float v) { f.write(reinterpret_cast<const char*>(&v), 4); }

}  // namespace

absl::Status WriteLlama2cFixture(const std::string& dir, const Llama2cFixtureSpec& s) {
  Generator gen(s.seed);
  const int64_t d = s.dim, h = s.hidden_dim, L = s.n_layers, v = s.vocab_size;
  const int64_t hd = d / s.n_heads, q = int64_t{s.n_heads} * hd, kv = int64_t{s.n_kv_heads} * hd;
  {
    std::ofstream f(dir + "/model.bin", std::ios::binary);
    for (int32_t x :
         {s.dim, s.hidden_dim, s.n_layers, s.n_heads, s.n_kv_heads, s.vocab_size, s.seq_len}) {
      PutInt(f, x);
    }
    auto normal = [&](int64_t n, double std) {
      for (int64_t i = 0; i < n; ++i) PutFloat(f, static_cast<float>(gen.Normal() * std));
    };
    auto scales = [&](int64_t n) {
      for (int64_t i = 0; i < n; ++i) PutFloat(f, 0.8f + 0.4f * gen.Uniform());
    };
    normal(v * d, 1.0);                            // token_embedding_table
    scales(L * d);                                 // rms_att_weight
    normal(L * q * d, 1.5 / std::sqrt(d));         // wq
    normal(L * kv * d, 1.5 / std::sqrt(d));        // wk
    normal(L * kv * d, 1.5 / std::sqrt(d));        // wv
    normal(L * d * q, 1.5 / std::sqrt(q));         // wo
    scales(L * d);                                 // rms_ffn_weight
    normal(L * h * d, 1.5 / std::sqrt(d));         // w1
    normal(L * d * h, 1.5 / std::sqrt(h));         // w2
    normal(L * h * d, 1.5 / std::sqrt(d));         // w3
    scales(d);                                     // rms_final_weight
    normal(2 * int64_t{s.seq_len} * hd / 2, 1.0);  // legacy freq_cis_real / imag (unused)
    if (!f) return absl::InternalError(absl::StrCat("cannot write ", dir, "/model.bin"));
  }
  {
    // 0 <unk>, 1 BOS, 2 EOS, 3..258 byte tokens, then " ", a..z and some merges.
    std::vector<std::pair<std::string, float>> pieces = {
        {"<unk>", 0.f}, {"\n<s>\n", 0.f}, {"\n</s>\n", 0.f}};
    for (int b = 0; b < 256; ++b) pieces.push_back({absl::StrFormat("<0x%02X>", b), 0.f});
    pieces.push_back({" ", -1.f});
    for (char c = 'a'; c <= 'z'; ++c) pieces.push_back({std::string(1, c), -2.f});
    const char* merges[] = {" t", " a", "th", "he",  "in",  "er",  "an",
                            "re", "on", " s", "the", " th", "ing", "and"};
    float score = 1.f;
    for (const char* m : merges) pieces.push_back({m, score += 0.5f});
    if (static_cast<int32_t>(pieces.size()) != s.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("the fixture tokenizer has ", pieces.size(),
                                                     " tokens; set vocab_size to that"));
    }
    std::ofstream f(dir + "/tok.bin", std::ios::binary);
    PutInt(f, 7);
    for (const auto& [text, sc] : pieces) {
      PutFloat(f, sc);
      PutInt(f, static_cast<int32_t>(text.size()));
      f.write(text.data(), text.size());
    }
    if (!f) return absl::InternalError(absl::StrCat("cannot write ", dir, "/tok.bin"));
  }
  return absl::OkStatus();
}

std::string TestTempDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::filesystem::path dir = std::filesystem::path(tmp != nullptr ? tmp : "/tmp") / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

}  // namespace testing
}  // namespace cctune
