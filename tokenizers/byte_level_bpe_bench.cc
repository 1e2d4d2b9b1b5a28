// Byte-level BPE (Qwen2.5) throughput:
//   bazel run -c opt //tokenizers:byte_level_bpe_bench
// The tokenizer is the committed 1000-token fixture (tests/assets/tokenizers/qwen_bpe_*) unless
// $CCTUNE_QWEN_VOCAB and $CCTUNE_QWEN_MERGES name a real vocab.json and merges.txt; the corpus
// is $CCTUNE_TOK_BENCH_TEXT or the fixture's texts repeated to about 1 MB. Encoding runs with
// the piece cache (torchtune's default size) and without it (bpe_cache_size 0: every piece
// merged).
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "benchmark/benchmark.h"
#include "core/status.h"
#include "nlohmann/json.hpp"
#include "tokenizers/byte_level_bpe.h"

namespace cctune {
namespace {

std::string ReadOrDie(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    std::exit(1);
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Env(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : fallback;
}

std::string AssetDir() {
  const char* w = std::getenv("BUILD_WORKSPACE_DIRECTORY");
  return std::string(w != nullptr ? w : ".") + "/tests/assets/tokenizers/";
}

struct BenchState {
  std::unique_ptr<ByteLevelBpeTokenizer> cached, uncached;
  std::string corpus;
};

BenchState* State() {
  static BenchState* state = [] {
    auto* s = new BenchState();
    const std::string vocab = Env("CCTUNE_QWEN_VOCAB", AssetDir() + "qwen_bpe_vocab.json");
    const std::string merges = Env("CCTUNE_QWEN_MERGES", AssetDir() + "qwen_bpe_merges.txt");
    ByteLevelBpeOptions options = Qwen2_5Options();
    for (const size_t entries : {options.cache_entries, size_t{0}}) {
      options.cache_entries = entries;
      auto tok = ByteLevelBpeTokenizer::Load(vocab, merges, options);
      if (!tok.ok()) {
        std::fprintf(stderr, "cannot load the tokenizer: %s\n", tok.status().ToString().c_str());
        std::exit(1);
      }
      (entries > 0 ? s->cached : s->uncached) = std::move(*tok);
    }
    const char* text = std::getenv("CCTUNE_TOK_BENCH_TEXT");
    if (text != nullptr) {
      s->corpus = ReadOrDie(text);
    } else {
      const nlohmann::json j =
          nlohmann::json::parse(ReadOrDie(AssetDir() + "qwen_cases.json"), nullptr, false);
      CCTUNE_CHECK(!j.is_discarded(), "qwen_cases.json is not JSON");
      while (s->corpus.size() < (1 << 20)) {
        for (const auto& c : j["cases"]) s->corpus += c["text"].get<std::string>() + "\n";
      }
    }
    std::fprintf(stderr, "corpus: %zu bytes, %zu tokens\n", s->corpus.size(),
                 s->cached->Encode(s->corpus, false, false).size());
    return s;
  }();
  return state;
}

void Encode(benchmark::State& st, bool cache) {
  BenchState* s = State();
  const ByteLevelBpeTokenizer& tok = cache ? *s->cached : *s->uncached;
  size_t tokens = 0;
  for (auto _ : st) {
    const std::vector<int32_t> ids = tok.Encode(s->corpus, false, false);
    tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations() * s->corpus.size()));
  st.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsIterationInvariantRate);
}

void BM_EncodeCached(benchmark::State& st) { Encode(st, true); }
void BM_EncodeUncached(benchmark::State& st) { Encode(st, false); }
BENCHMARK(BM_EncodeCached)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EncodeUncached)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace cctune

BENCHMARK_MAIN();
