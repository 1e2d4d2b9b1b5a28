#include "tokenizers/sentencepiece.h"

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "core/random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/shared_dir.h"
#include "tokenizers/test_vectors.h"
#include "tokenizers/utf8.h"

namespace cctune {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::unique_ptr<SentencePieceTokenizer> LoadOrSkip(const std::string& rel, std::string* why) {
  absl::StatusOr<std::string> path = cctune::testing::SharedFile(rel);
  if (!path.ok()) {
    *why = path.status().ToString();
    return nullptr;
  }
  auto tok = SentencePieceTokenizer::Load(*path);
  CCTUNE_CHECK_OK(tok);
  return std::move(*tok);
}

#define LOAD_OR_SKIP(var, rel)                  \
  std::string why_##var;                        \
  auto var = LoadOrSkip(rel, &why_##var);       \
  if (var == nullptr) GTEST_SKIP() << why_##var

TEST(SentencePieceTest, Llama2SharedVocabVectorsAllMatch) {
  LOAD_OR_SKIP(tok, "tokenizers/llama2/tokenizer.model");
  auto cases = cctune::testing::LoadSharedVocabVectors("tokenizers/llama2");
  ASSERT_TRUE(cases.ok()) << cases.status();
  ASSERT_EQ(cases->size(), 46u);
  int matched = 0;
  for (const auto& c : *cases) {
    const std::vector<int32_t> ids = tok->Encode(c.text, false, false);
    EXPECT_EQ(ids, c.ids) << "'" << c.text << "'";
    matched += ids == c.ids;
  }
  EXPECT_EQ(matched, 46);
  std::printf("llama2 vocab vectors: %d/46 match\n", matched);
}

TEST(SentencePieceTest, Llama2Properties) {
  LOAD_OR_SKIP(tok, "tokenizers/llama2/tokenizer.model");
  EXPECT_EQ(tok->vocab_size(), 32000);
  EXPECT_EQ(tok->bos_id(), 1);
  EXPECT_EQ(tok->eos_id(), 2);
  EXPECT_EQ(tok->pad_id(), 0);  // the model has none; torchtune uses 0
  EXPECT_THAT(tok->stop_tokens(), ElementsAre(2));
  const std::vector<int32_t> ids = tok->Encode("Hello world", true, true);
  ASSERT_GE(ids.size(), 4u);
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ(ids.back(), 2);
  auto text = tok->Decode(ids);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "Hello world");
  EXPECT_EQ(tok->Decode({5, 32000}).status().code(), absl::StatusCode::kInvalidArgument);
}

void CheckFixture(const SentencePieceTokenizer& tok, const std::string& fixture_name) {
  auto fixture = cctune::testing::LoadTokenizerFixture(fixture_name);
  ASSERT_TRUE(fixture.ok()) << fixture.status();
  ASSERT_GT(fixture->cases.size(), 300u);
  int matched = 0;
  int round_trips = 0;
  for (const auto& c : fixture->cases) {
    const std::vector<int32_t> ids = tok.Encode(c.text, false, false);
    EXPECT_EQ(ids, c.ids) << "'" << c.text << "'";
    matched += ids == c.ids;
    auto decoded = tok.Decode(ids);
    ASSERT_TRUE(decoded.ok());
    if (!c.normalized) {
      EXPECT_EQ(*decoded, c.text);
      ++round_trips;
    }
  }
  EXPECT_EQ(matched, static_cast<int>(fixture->cases.size()));
  EXPECT_GT(round_trips, 300);
  for (const auto& c : fixture->decode_cases) {
    auto decoded = tok.Decode(c.ids);
    ASSERT_TRUE(decoded.ok());
    EXPECT_EQ(*decoded, c.text);
  }
}

TEST(SentencePieceTest, Llama2FixtureParity) {
  LOAD_OR_SKIP(tok, "tokenizers/llama2/tokenizer.model");
  CheckFixture(*tok, "llama2_cases.json");
}

TEST(SentencePieceTest, Tok512FixtureParity) {
  LOAD_OR_SKIP(tok, "models/stories260K/tok512.model");
  CheckFixture(*tok, "tok512_cases.json");
}

TEST(SentencePieceTest, TrimLeadingWhitespaceDropsTheDummyPrefix) {
  LOAD_OR_SKIP(tok, "tokenizers/llama2/tokenizer.model");
  EncodeOptions trim;
  trim.trim_leading_whitespace = true;
  // Encoding a continuation without its dummy prefix splices onto what came before.
  std::vector<int32_t> spliced = tok->Encode("Hello", false, false);
  tok->EncodeAppend(" world, again", trim, &spliced);
  EXPECT_EQ(spliced, tok->Encode("Hello world, again", false, false));
  const std::vector<int32_t> plain = tok->Encode("world", false, false);
  const std::vector<int32_t> trimmed = tok->Encode("world", trim);
  EXPECT_NE(plain, trimmed);
  auto a = tok->Decode(plain);
  auto b = tok->Decode(trimmed);
  EXPECT_EQ(*a, "world");
  EXPECT_EQ(*b, "world");
}

TEST(SentencePieceTest, StreamingPiecesMatchDecode) {
  LOAD_OR_SKIP(tok, "tokenizers/llama2/tokenizer.model");
  Generator gen(17);
  int compared = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<int32_t> ids = {1};
    const size_t n = 1 + gen.UniformInt(20);
    for (size_t i = 0; i < n; ++i) ids.push_back(3 + static_cast<int32_t>(gen.UniformInt(31997)));
    Utf8StreamBuffer stream;
    std::string streamed;
    int32_t prev = -1;
    for (int32_t id : ids) {
      auto piece = tok->DecodePiece(id, prev);
      ASSERT_TRUE(piece.ok());
      streamed += stream.Push(*piece);
      prev = id;
    }
    streamed += stream.Flush();
    auto whole = tok->Decode(ids);
    ASSERT_TRUE(whole.ok());
    ASSERT_TRUE(IsValidUtf8(streamed));
    // SentencePiece counts U+FFFD for broken byte runs its own way; compare the rest exactly.
    if (whole->find("\xEF\xBF\xBD") == std::string::npos) {
      EXPECT_EQ(streamed, *whole);
      ++compared;
    }
  }
  EXPECT_GT(compared, 250);
}

TEST(SentencePieceTest, LoadErrorsNameThePath) {
  auto missing = SentencePieceTokenizer::Load("/nonexistent/tokenizer.model");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("/nonexistent/tokenizer.model"));
  const std::string garbage = ::testing::TempDir() + "/garbage.model";
  {
    std::ofstream out(garbage, std::ios::binary);
    out << "this is not a serialized ModelProto \xFF\xFE\x01";
  }
  auto bad = SentencePieceTokenizer::Load(garbage);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr(garbage));
}

}  // namespace
}  // namespace cctune
