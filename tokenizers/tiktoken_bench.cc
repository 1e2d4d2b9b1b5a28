// Llama 3 tokenizer throughput. Build the corpus and time Python tiktoken on it with
// tools/golden/bench_tiktoken.py, then:
//   CCTUNE_TOK_BENCH_TEXT=/tmp/cctune_tok_bench.txt bazel run -c opt //tokenizers:tiktoken_bench
// Without CCTUNE_TOK_BENCH_TEXT the corpus is the parity fixture's texts repeated (less
// representative). The tokenizer comes from $CCTUNE_LLAMA3_TOKENIZER or
// <workspace>/../shared/tokenizers/llama3/tokenizer.model. When <corpus>.ids exists (tiktoken's
// ids), the ids are checked before timing.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "benchmark/benchmark.h"
#include "core/status.h"
#include "nlohmann/json.hpp"
#include "tokenizers/tiktoken.h"

namespace cctune {
namespace {

std::string ReadOrEmpty(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "";
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string WorkspaceDir() {
  const char* w = std::getenv("BUILD_WORKSPACE_DIRECTORY");
  return w != nullptr ? w : ".";
}

struct BenchState {
  std::unique_ptr<TiktokenTokenizer> tok;
  std::string corpus;
  std::vector<std::string> lines;
};

BenchState* State() {
  static BenchState* state = [] {
    auto* s = new BenchState();
    const char* tok_env = std::getenv("CCTUNE_LLAMA3_TOKENIZER");
    const std::string tok_path = tok_env != nullptr
                                     ? tok_env
                                     : WorkspaceDir() + "/../shared/tokenizers/llama3/tokenizer.model";
    auto tok = TiktokenTokenizer::Load(tok_path, Llama3TiktokenOptions());
    if (!tok.ok()) {
      std::fprintf(stderr, "cannot load the Llama 3 tokenizer: %s\n",
                   tok.status().ToString().c_str());
      std::exit(1);
    }
    s->tok = std::move(*tok);
    const char* text_env = std::getenv("CCTUNE_TOK_BENCH_TEXT");
    if (text_env != nullptr) {
      s->corpus = ReadOrEmpty(text_env);
      if (s->corpus.empty()) {
        std::fprintf(stderr, "cannot read $CCTUNE_TOK_BENCH_TEXT=%s\n", text_env);
        std::exit(1);
      }
      const std::string ids_bytes = ReadOrEmpty(std::string(text_env) + ".ids");
      if (!ids_bytes.empty()) {
        std::vector<int32_t> expected(ids_bytes.size() / 4);
        std::memcpy(expected.data(), ids_bytes.data(), expected.size() * 4);
        const std::vector<int32_t> got = s->tok->Encode(s->corpus, false, false);
        size_t first_diff = 0;
        while (first_diff < got.size() && first_diff < expected.size() &&
               got[first_diff] == expected[first_diff]) {
          ++first_diff;
        }
        const bool same = got == expected;
        std::fprintf(stderr, "corpus: %zu bytes, %zu tokens; ids %s tiktoken's%s\n",
                     s->corpus.size(), got.size(), same ? "match" : "DIFFER from",
                     same ? "" : (" at index " + std::to_string(first_diff)).c_str());
      }
    } else {
      const std::string fixture =
          ReadOrEmpty(WorkspaceDir() + "/tests/assets/tokenizers/llama3_cases.json");
      const nlohmann::json j = nlohmann::json::parse(fixture, nullptr, false);
      std::string base;
      if (!j.is_discarded()) {
        for (const auto& c : j["cases"]) base += c["text"].get<std::string>() + "\n";
      }
      if (base.empty()) base = "The quick brown fox jumps over the lazy dog.\n";
      while (s->corpus.size() < (8u << 20)) s->corpus += base;
      std::fprintf(stderr, "corpus: fixture texts repeated (%zu bytes); set "
                           "CCTUNE_TOK_BENCH_TEXT for the multilingual corpus\n",
                   s->corpus.size());
    }
    for (absl::string_view line : absl::StrSplit(s->corpus, '\n')) {
      s->lines.emplace_back(line);
    }
    return s;
  }();
  return state;
}

// The whole corpus as one text; the piece cache stays warm across iterations.
void BM_Llama3Encode(benchmark::State& bench) {
  BenchState* s = State();
  std::vector<int32_t> ids;
  for (auto _ : bench) {
    ids.clear();
    s->tok->EncodeAppend(s->corpus, EncodeOptions(), &ids);
    benchmark::DoNotOptimize(ids.data());
  }
  bench.SetBytesProcessed(static_cast<int64_t>(bench.iterations() * s->corpus.size()));
  bench.counters["tokens"] = static_cast<double>(ids.size());
}
BENCHMARK(BM_Llama3Encode)->Unit(benchmark::kMillisecond);

// The same with the cache emptied before each pass: every distinct piece is merged once.
void BM_Llama3EncodeColdCache(benchmark::State& bench) {
  BenchState* s = State();
  std::vector<int32_t> ids;
  for (auto _ : bench) {
    TiktokenTokenizer::ClearThreadCache();
    ids.clear();
    s->tok->EncodeAppend(s->corpus, EncodeOptions(), &ids);
    benchmark::DoNotOptimize(ids.data());
  }
  bench.SetBytesProcessed(static_cast<int64_t>(bench.iterations() * s->corpus.size()));
}
BENCHMARK(BM_Llama3EncodeColdCache)->Unit(benchmark::kMillisecond);

// One Encode call per line (a data loader's pattern), on all threads with OpenMP.
void BM_Llama3EncodeLinesParallel(benchmark::State& bench) {
  BenchState* s = State();
  const int n = static_cast<int>(s->lines.size());
  for (auto _ : bench) {
    int64_t total = 0;
#pragma omp parallel for schedule(dynamic, 256) reduction(+ : total)
    for (int i = 0; i < n; ++i) {
      total += static_cast<int64_t>(s->tok->Encode(s->lines[i], false, false).size());
    }
    benchmark::DoNotOptimize(total);
  }
  bench.SetBytesProcessed(static_cast<int64_t>(bench.iterations() * s->corpus.size()));
}
BENCHMARK(BM_Llama3EncodeLinesParallel)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_Llama3Decode(benchmark::State& bench) {
  BenchState* s = State();
  const std::vector<int32_t> ids = s->tok->Encode(s->corpus, false, false);
  for (auto _ : bench) {
    auto text = s->tok->Decode(ids);
    benchmark::DoNotOptimize(text->data());
  }
  bench.SetBytesProcessed(static_cast<int64_t>(bench.iterations() * s->corpus.size()));
}
BENCHMARK(BM_Llama3Decode)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace cctune
