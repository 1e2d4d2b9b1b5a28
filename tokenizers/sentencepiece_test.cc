#include "tokenizers/sentencepiece.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "core/random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "core/status.h"
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

std::string FixtureBytes(const std::string& name) {
  auto path = cctune::testing::TokenizerFixturePath(name);
  CCTUNE_CHECK_OK(path);
  auto bytes = cctune::testing::ReadTestFile(*path);
  CCTUNE_CHECK_OK(bytes);
  return *bytes;
}

// A length-delimited field (short payloads only); a repeated message field merges into the
// earlier one, as protobuf does, so appending one edits the model.
std::string Field(int number, const std::string& payload) {
  CCTUNE_CHECK(payload.size() < 128);
  return std::string(1, static_cast<char>(number << 3 | 2)) +
         std::string(1, static_cast<char>(payload.size())) + payload;
}

TEST(SentencePieceTest, UnsupportedModelsAreUnimplementedAtLoad) {
  const std::string bpe = FixtureBytes("sp_bpe.model");
  ASSERT_TRUE(SentencePieceTokenizer::FromString(bpe, "ok.model").ok());
  // normalizer_spec { name: "nmt_nfkc" precompiled_charsmap: "..." }
  auto nfkc = SentencePieceTokenizer::FromString(
      bpe + Field(3, Field(1, "nmt_nfkc") + Field(2, "charsmap")), "/x/nfkc.model");
  EXPECT_EQ(nfkc.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(nfkc.status().message()), HasSubstr("/x/nfkc.model"));
  EXPECT_THAT(std::string(nfkc.status().message()), HasSubstr("nmt_nfkc"));
  // trainer_spec { model_type: WORD }
  auto word = SentencePieceTokenizer::FromString(bpe + Field(2, std::string("\x18\x03", 2)),
                                                 "/x/word.model");
  EXPECT_EQ(word.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(word.status().message()), HasSubstr("/x/word.model"));
  // trainer_spec { bos_piece: "<nope>" } (field 46: a two-byte tag): no bos.
  auto no_bos = SentencePieceTokenizer::FromString(bpe + Field(2, "\xF2\x02\x06<nope>"),
                                                   "/x/nobos.model");
  EXPECT_EQ(no_bos.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(no_bos.status().message()), HasSubstr("lacks bos"));
  // Garbage and truncations are InvalidArgument naming the file (the fuzzer covers the rest).
  auto cut = SentencePieceTokenizer::FromString(bpe.substr(0, bpe.size() / 2 + 1), "/x/cut.model");
  EXPECT_EQ(cut.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(cut.status().message()), HasSubstr("/x/cut.model"));
}

TEST(SentencePieceTest, FixtureBpeSpecialPieces) {
  auto tok = SentencePieceTokenizer::FromString(FixtureBytes("sp_bpe.model"), "sp_bpe.model");
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->pad_id(), 3);  // the model has one
  EXPECT_EQ((*tok)->bos_id(), 1);
  // The user-defined piece is one id wherever it appears; "<s>" text is never the BOS id.
  const std::vector<int32_t> ids = (*tok)->Encode("ka<tool>lo <s>", false, false);
  EXPECT_THAT(ids, ::testing::Contains(4));
  EXPECT_THAT(ids, ::testing::Not(::testing::Contains(1)));
  // A character outside the vocabulary falls back to its UTF-8 bytes (<0xXX> = id 5 + byte).
  const std::vector<int32_t> emoji = (*tok)->Encode("\xF0\x9F\xA6\x80", false, false);
  ASSERT_GE(emoji.size(), 4u);
  EXPECT_THAT(std::vector<int32_t>(emoji.end() - 4, emoji.end()),
              ElementsAre(5 + 0xF0, 5 + 0x9F, 5 + 0xA6, 5 + 0x80));
  EXPECT_EQ(*(*tok)->Decode(emoji), "\xF0\x9F\xA6\x80");
}

TEST(SentencePieceTest, FixtureUnigramMergesUnknownRuns) {
  auto tok =
      SentencePieceTokenizer::FromString(FixtureBytes("sp_unigram.model"), "sp_unigram.model");
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->pad_id(), 0);  // none in the model
  // Three unknown characters in a row are one <unk> (id 0), decoded as " \xE2\x81\x87 ".
  const std::vector<int32_t> ids = (*tok)->Encode("ka\xE3\x81\x82\xE3\x81\x84\xE3\x81\x86", false, false);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 0), 1);
  EXPECT_EQ(ids.back(), 0);
  EXPECT_EQ(*(*tok)->Decode(ids), "ka \xE2\x81\x87 ");
  // Extra spaces fold away with this model's normaliser.
  EXPECT_EQ((*tok)->Encode("  ka   lo  ", false, false), (*tok)->Encode("ka lo", false, false));
}

}  // namespace
}  // namespace cctune
