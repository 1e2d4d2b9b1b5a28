// SentencePiece encode throughput: cctune's own encoder against libsentencepiece on the same
// text, for each available model (Llama 2 and tok512 from ../shared, the committed fixtures).
//   bazel run -c opt //tokenizers:sentencepiece_bench
// The text is $CCTUNE_SP_BENCH_TEXT when set, else the Llama 2 parity fixture's texts
// repeated to 1 MiB; it is encoded in paragraphs of about 4 KiB, as a data pipeline would.
// The ids of both are compared before timing. bytes_per_second is the figure to read.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "core/status.h"
#include "tests/util/shared_dir.h"
#include "tokenizers/sentencepiece.h"
#include "tokenizers/sentencepiece_reference.h"
#include "tokenizers/test_vectors.h"
#include "tokenizers/utf8.h"

namespace cctune {
namespace {

std::vector<std::string> Paragraphs() {
  std::string text;
  if (const char* path = std::getenv("CCTUNE_SP_BENCH_TEXT")) {
    auto t = testing::ReadTestFile(path);
    CCTUNE_CHECK_OK(t);
    text = *t;
  } else {
    auto fixture = testing::LoadTokenizerFixture("llama2_cases.json");
    CCTUNE_CHECK_OK(fixture);
    while (text.size() < (1 << 20)) {
      for (const auto& c : fixture->cases) text += c.text + "\n";
    }
  }
  text = ReplaceInvalidUtf8(text);
  std::vector<std::string> paragraphs;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = std::min(text.size(), start + 4096);
    while (end < text.size() && (static_cast<uint8_t>(text[end]) & 0xC0) == 0x80) ++end;
    paragraphs.push_back(text.substr(start, end - start));
    start = end;
  }
  return paragraphs;
}

const std::vector<std::string>& Text() {
  static const auto* paragraphs = new std::vector<std::string>(Paragraphs());
  return *paragraphs;
}

void Run(benchmark::State& state, const std::string& path, bool reference) {
  auto ours = SentencePieceTokenizer::Load(path);
  CCTUNE_CHECK_OK(ours);
  std::string error;
  auto ref = testing::ReferenceSentencePiece::Load(path, &error);
  CCTUNE_CHECK(ref != nullptr, "libsentencepiece: ", error);
  size_t bytes = 0;
  for (const std::string& p : Text()) {
    std::vector<int> want;
    CCTUNE_CHECK(ref->Encode(p, &want, &error));
    const std::vector<int32_t> got = (*ours)->Encode(p, false, false);
    CCTUNE_CHECK(std::vector<int>(got.begin(), got.end()) == want, "ids differ on ", path);
    bytes += p.size();
  }
  std::vector<int> ids;
  std::vector<int32_t> ids32;
  for (auto _ : state) {
    for (const std::string& p : Text()) {
      if (reference) {
        ids.clear();
        ref->Encode(p, &ids, &error);
        benchmark::DoNotOptimize(ids.data());
      } else {
        ids32.clear();
        (*ours)->EncodeAppend(p, EncodeOptions(), &ids32);
        benchmark::DoNotOptimize(ids32.data());
      }
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
}

void RegisterAll() {
  struct Entry {
    const char* name;
    absl::StatusOr<std::string> path;
  };
  std::vector<Entry> entries;
  entries.push_back({"llama2", testing::SharedFile("tokenizers/llama2/tokenizer.model")});
  entries.push_back({"tok512", testing::SharedFile("models/stories260K/tok512.model")});
  entries.push_back({"fixture_bpe", testing::TokenizerFixturePath("sp_bpe.model")});
  entries.push_back({"fixture_unigram", testing::TokenizerFixturePath("sp_unigram.model")});
  for (const Entry& e : entries) {
    if (!e.path.ok()) {
      std::printf("skipping %s: %s\n", e.name, e.path.status().ToString().c_str());
      continue;
    }
    const std::string path = *e.path;
    benchmark::RegisterBenchmark((std::string("Encode/cctune/") + e.name).c_str(),
                                 [path](benchmark::State& s) { Run(s, path, false); })
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark((std::string("Encode/libsentencepiece/") + e.name).c_str(),
                                 [path](benchmark::State& s) { Run(s, path, true); })
        ->Unit(benchmark::kMillisecond);
  }
}

// One benchmark per model found; benchmark_main runs them.
const bool kRegistered = (RegisterAll(), true);

}  // namespace
}  // namespace cctune
