#include "tokenizers/tiktoken.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
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

// Loads Meta's Llama 3 tokenizer once for the whole suite (it takes ~100 ms).
class Llama3Test : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<std::string> path =
        cctune::testing::SharedFile("tokenizers/llama3/tokenizer.model");
    if (!path.ok()) {
      skip_reason_ = new std::string(path.status().ToString());
      return;
    }
    auto tok = TiktokenTokenizer::Load(*path, Llama3TiktokenOptions());
    CCTUNE_CHECK_OK(tok);
    tok_ = tok->release();
  }
  static void TearDownTestSuite() {
    delete tok_;
    tok_ = nullptr;
  }
  void SetUp() override {
    if (tok_ == nullptr) GTEST_SKIP() << *skip_reason_;
  }
  static TiktokenTokenizer* tok_;
  static std::string* skip_reason_;
};
TiktokenTokenizer* Llama3Test::tok_ = nullptr;
std::string* Llama3Test::skip_reason_ = nullptr;

TEST_F(Llama3Test, SharedVocabVectorsAllMatch) {
  auto cases = cctune::testing::LoadSharedVocabVectors("tokenizers/llama3");
  ASSERT_TRUE(cases.ok()) << cases.status();
  ASSERT_EQ(cases->size(), 46u);
  int matched = 0;
  for (size_t i = 0; i < cases->size(); ++i) {
    const auto& c = (*cases)[i];
    const std::vector<int32_t> ids = tok_->Encode(c.text, false, false);
    EXPECT_EQ(ids, c.ids) << "vector " << i << ": '" << c.text << "'";
    matched += ids == c.ids;
  }
  EXPECT_EQ(matched, 46);
  std::printf("llama3 vocab vectors: %d/46 match\n", matched);
}

TEST_F(Llama3Test, MetaSentenceWithBosAndEos) {
  EXPECT_THAT(tok_->Encode("This is a test sentence.", true, true),
              ElementsAre(128000, 2028, 374, 264, 1296, 11914, 13, 128001));
  auto text = tok_->Decode({2028, 374, 264, 1296, 11914, 13});
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "This is a test sentence.");
}

TEST_F(Llama3Test, SpecialTokens) {
  EXPECT_EQ(tok_->vocab_size(), 128256);
  EXPECT_EQ(tok_->num_base_tokens(), 128000);
  EXPECT_EQ(tok_->bos_id(), 128000);
  EXPECT_EQ(tok_->eos_id(), 128001);
  EXPECT_EQ(tok_->pad_id(), 128004);
  EXPECT_THAT(tok_->stop_tokens(), ElementsAre(128001, 128008, 128009));
  const std::vector<std::pair<std::string, int32_t>> expected = {
      {"<|begin_of_text|>", 128000}, {"<|end_of_text|>", 128001},
      {"<|reserved_special_token_0|>", 128002}, {"<|reserved_special_token_1|>", 128003},
      {"<|finetune_right_pad_id|>", 128004}, {"<|step_id|>", 128005},
      {"<|start_header_id|>", 128006}, {"<|end_header_id|>", 128007}, {"<|eom_id|>", 128008},
      {"<|eot_id|>", 128009}, {"<|python_tag|>", 128010},
      {"<|reserved_special_token_2|>", 128011}, {"<|reserved_special_token_246|>", 128255}};
  for (const auto& [text, id] : expected) {
    EXPECT_EQ(tok_->SpecialTokenId(text), id) << text;
    auto decoded = tok_->Decode({id});
    ASSERT_TRUE(decoded.ok());
    EXPECT_EQ(*decoded, text);
  }
  EXPECT_EQ(tok_->SpecialTokenId("<|reserved_special_token_247|>"), std::nullopt);
  EncodeOptions parse;
  parse.parse_special = true;
  EXPECT_THAT(tok_->Encode("<|eot_id|>", parse), ElementsAre(128009));
  // Without parsing, the same text is ordinary text.
  const std::vector<int32_t> plain = tok_->Encode("<|eot_id|>", false, false);
  EXPECT_GT(plain.size(), 1u);
  for (int32_t id : plain) EXPECT_LT(id, 128000);
}

TEST_F(Llama3Test, FixtureParityAndRoundTrip) {
  auto fixture = cctune::testing::LoadTokenizerFixture("llama3_cases.json");
  ASSERT_TRUE(fixture.ok()) << fixture.status();
  ASSERT_GT(fixture->cases.size(), 300u);
  int matched = 0;
  for (const auto& c : fixture->cases) {
    EncodeOptions options;
    options.parse_special = c.parse_special;
    const std::vector<int32_t> ids = tok_->Encode(c.text, options);
    EXPECT_EQ(ids, c.ids) << "text: '" << c.text << "'";
    matched += ids == c.ids;
    auto decoded = tok_->Decode(ids);
    ASSERT_TRUE(decoded.ok());
    EXPECT_EQ(*decoded, c.text);
  }
  EXPECT_EQ(matched, static_cast<int>(fixture->cases.size()));
  ASSERT_GT(fixture->decode_cases.size(), 100u);
  for (const auto& c : fixture->decode_cases) {
    auto decoded = tok_->Decode(c.ids);
    ASSERT_TRUE(decoded.ok());
    EXPECT_EQ(*decoded, c.text) << "ids[0] " << c.ids[0];
  }
}

TEST_F(Llama3Test, InvalidUtf8InputIsReplacedFirst) {
  const std::string bad = "abc \xFF\xFE def \xE2\x82 x\xC3";
  EXPECT_EQ(tok_->Encode(bad, false, false),
            tok_->Encode(ReplaceInvalidUtf8(bad), false, false));
}

TEST_F(Llama3Test, DecodeRejectsOutOfRangeIds) {
  auto r = tok_->Decode({1, 128256});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("128256"));
  EXPECT_FALSE(tok_->Decode({-1}).ok());
  EXPECT_FALSE(tok_->DecodePiece(200000, -1).ok());
}

// U+0085 (NEL) is white space to the regex engines tiktoken's pattern was written for (Python's
// `regex` module gives this split), though PCRE2's \s lacks it.
TEST_F(Llama3Test, NextLineIsWhiteSpaceWhenSplitting) {
  const std::string text = "a!\xC2\x85 \xC2\x85x \xC2\x85\xC2\x85\n";
  EXPECT_THAT(tok_->PreTokenize(text, /*use_fast_path=*/true),
              ElementsAre("a", "!", "\xC2\x85 ", "\xC2\x85x", " \xC2\x85\xC2\x85\n"));
}

// Random text mixing ASCII classes with the non-ASCII characters the fast path must defer on.
std::string RandomText(Generator& gen, size_t length) {
  static const std::vector<std::string> kAtoms = {
      "a", "b", "Z", "s", "t", "r", "e", "v", "m", "l", "d", "S", "T", "R", "E", "L", "D",
      "0", "1", "9", " ", " ", " ", "\t", "\n", "\r", "\x0b", "\x0c", "'", "'", "!", ".",
      ",", "-", "(", "<", "|", ">", "\x01", "\x7f", "\xC3\xA9", "\xC5\xBF", "\xC2\xA0",
      "\xC2\x85", "\xE4\xB8\xAD", "\xD9\xA3", "\xE2\x80\x94", "\xF0\x9F\xA6\x99",
      "\xE3\x80\x80", "\xC2\xBD"};
  std::string s;
  for (size_t i = 0; i < length; ++i) s += kAtoms[gen.UniformInt(kAtoms.size())];
  return s;
}

TEST_F(Llama3Test, AsciiFastPathSplitsExactlyLikePcre2) {
  Generator gen(7);
  for (int trial = 0; trial < 3000; ++trial) {
    const std::string text = RandomText(gen, 1 + gen.UniformInt(40));
    const auto fast = tok_->PreTokenize(text, /*use_fast_path=*/true);
    const auto slow = tok_->PreTokenize(text, /*use_fast_path=*/false);
    ASSERT_EQ(fast, slow) << "text: '" << absl::CHexEscape(text) << "'";
    std::string joined;
    for (auto p : fast) joined.append(p.data(), p.size());
    ASSERT_EQ(joined, text);
  }
}

// Reference BPE written the obvious way: rescan every adjacent pair after each merge.
std::vector<int32_t> ReferenceBpe(const TiktokenTokenizer& tok, const std::string& piece) {
  std::vector<std::string> parts;
  for (char c : piece) parts.emplace_back(1, c);
  while (parts.size() > 1) {
    int32_t best = -1;
    size_t at = 0;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      const int32_t r = tok.Rank(parts[i] + parts[i + 1]);
      if (r >= 0 && (best < 0 || r < best)) {
        best = r;
        at = i;
      }
    }
    if (best < 0) break;
    parts[at] += parts[at + 1];
    parts.erase(parts.begin() + at + 1);
  }
  std::vector<int32_t> ids;
  for (const auto& p : parts) ids.push_back(tok.Rank(p));
  return ids;
}

TEST_F(Llama3Test, MergeMatchesReferenceBpe) {
  Generator gen(11);
  const std::vector<std::string> alphabets = {"ab", "abc ", "aaaaab", "= ", "0123456789",
                                              "\xE4\xB8\xAD\xE6\x96\x87", "xyzzy_foo"};
  for (int trial = 0; trial < 400; ++trial) {
    const std::string& alphabet = alphabets[gen.UniformInt(alphabets.size())];
    const size_t n = 2 + gen.UniformInt(trial % 10 == 0 ? 300 : 60);
    std::string piece;
    while (piece.size() < n) {
      // Multi-byte alphabets add whole characters.
      const size_t step = static_cast<uint8_t>(alphabet[0]) >= 0x80 ? 3 : 1;
      const size_t k = gen.UniformInt(alphabet.size() / step) * step;
      piece += alphabet.substr(k, step);
    }
    const std::vector<int32_t> expected = ReferenceBpe(*tok_, piece);
    std::vector<int32_t> linear, heap;
    tok_->BytePairEncode(piece, /*force_heap=*/false, &linear);
    tok_->BytePairEncode(piece, /*force_heap=*/true, &heap);
    ASSERT_EQ(linear, expected) << absl::CHexEscape(piece);
    ASSERT_EQ(heap, expected) << absl::CHexEscape(piece);
  }
}

TEST_F(Llama3Test, LongRunsRoundTrip) {
  for (const std::string& text :
       {std::string(1 << 20, ' '), std::string(1 << 18, 'a') + " b", std::string(100000, '\n'),
        std::string(50000, '=') + "x", absl::StrCat(std::string(200000, ' '), "word")}) {
    const std::vector<int32_t> ids = tok_->Encode(text, false, false);
    auto decoded = tok_->Decode(ids);
    ASSERT_TRUE(decoded.ok());
    EXPECT_EQ(decoded->size(), text.size());
    EXPECT_TRUE(*decoded == text);
  }
}

TEST_F(Llama3Test, StreamingPiecesReassembleDecode) {
  Generator gen(3);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<int32_t> ids;
    const size_t n = 1 + gen.UniformInt(30);
    for (size_t i = 0; i < n; ++i) ids.push_back(static_cast<int32_t>(gen.UniformInt(128000)));
    Utf8StreamBuffer stream;
    std::string streamed;
    int32_t prev = -1;
    for (int32_t id : ids) {
      auto piece = tok_->DecodePiece(id, prev);
      ASSERT_TRUE(piece.ok());
      const std::string out = stream.Push(*piece);
      EXPECT_TRUE(IsValidUtf8(out));
      streamed += out;
      prev = id;
    }
    streamed += stream.Flush();
    auto whole = tok_->Decode(ids);
    ASSERT_TRUE(whole.ok());
    EXPECT_EQ(streamed, *whole);
  }
}

TEST_F(Llama3Test, ParallelEncodingIsDeterministic) {
  Generator gen(5);
  std::vector<std::string> texts;
  for (int i = 0; i < 64; ++i) texts.push_back(RandomText(gen, 200));
  std::vector<std::vector<int32_t>> serial(texts.size()), parallel(texts.size());
  for (size_t i = 0; i < texts.size(); ++i) serial[i] = tok_->Encode(texts[i], false, false);
#pragma omp parallel for num_threads(4)
  for (int i = 0; i < static_cast<int>(texts.size()); ++i) {
    parallel[i] = tok_->Encode(texts[i], false, false);
  }
  EXPECT_EQ(serial, parallel);
}

// ---- Loader validation on small synthetic files (no ../shared needed). ----

std::string Base64(const std::string& bytes) {
  static const char* kAlphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t v = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8) |
                       uint8_t(bytes[i + 2]);
    for (int s = 18; s >= 0; s -= 6) out += kAlphabet[(v >> s) & 63];
  }
  if (bytes.size() - i == 1) {
    const uint32_t v = uint8_t(bytes[i]) << 16;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += "==";
  } else if (bytes.size() - i == 2) {
    const uint32_t v = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += "=";
  }
  return out;
}

// All 256 bytes, then a few merges: "ab" 256, "cd" 257, "abcd" 258, " ab" 259.
std::string MiniFile() {
  std::string file;
  for (int b = 0; b < 256; ++b) file += absl::StrCat(Base64(std::string(1, char(b))), " ", b, "\n");
  file += absl::StrCat(Base64("ab"), " 256\n", Base64("cd"), " 257\n", Base64("abcd"), " 258\n",
                       Base64(" ab"), " 259\n");
  return file;
}

TiktokenOptions MiniOptions() {
  TiktokenOptions o;
  o.pattern = kLlama3Pattern;
  o.special_tokens = {"<|bos|>", "<|eos|>"};
  o.bos_token = "<|bos|>";
  o.eos_token = "<|eos|>";
  o.stop_tokens = {"<|eos|>"};
  return o;
}

TEST(TiktokenLoadTest, MiniVocabularyEncodes) {
  auto tok = TiktokenTokenizer::FromString(MiniFile(), "mini.tiktoken", MiniOptions());
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->vocab_size(), 262);
  EXPECT_THAT((*tok)->Encode("abcd ab", true, true), ElementsAre(260, 258, 259, 261));
  EXPECT_THAT((*tok)->Encode("abce", false, false), ElementsAre(256, 'c', 'e'));
}

std::string LoadError(const std::string& file) {
  auto tok = TiktokenTokenizer::FromString(file, "bad.tiktoken", MiniOptions());
  EXPECT_FALSE(tok.ok());
  return tok.ok() ? "" : std::string(tok.status().message());
}

std::string ReplaceLine(const std::string& file, int line_index, const std::string& line) {
  std::vector<std::string> lines = absl::StrSplit(file, '\n');
  lines[line_index] = line;
  return absl::StrJoin(lines, "\n");
}

TEST(TiktokenLoadTest, ErrorsNameFileAndLine) {
  const std::string good = MiniFile();
  EXPECT_THAT(LoadError(ReplaceLine(good, 4, "QQ!= 4")), HasSubstr("bad.tiktoken:5: invalid base64"));
  EXPECT_THAT(LoadError(ReplaceLine(good, 4, "BA= 4")), HasSubstr("bad.tiktoken:5: invalid base64"));
  EXPECT_THAT(LoadError(ReplaceLine(good, 9, "CQ== nine")),
              HasSubstr("bad.tiktoken:10: rank 'nine' is not a non-negative integer"));
  EXPECT_THAT(LoadError(ReplaceLine(good, 9, "CQ== -9")), HasSubstr("bad.tiktoken:10: rank"));
  EXPECT_THAT(LoadError(ReplaceLine(good, 9, "CQ==")),
              HasSubstr("bad.tiktoken:10: expected '<base64 token> <rank>'"));
  EXPECT_THAT(LoadError(ReplaceLine(good, 7, "\xC3\x28\xFF\xFE 7")),
              HasSubstr("bad.tiktoken:8: invalid base64"));
  EXPECT_THAT(LoadError(ReplaceLine(good, 259, absl::StrCat(Base64("zz"), " 3"))),
              HasSubstr("bad.tiktoken:260: duplicate rank 3 (first on line 4)"));
  EXPECT_THAT(LoadError(ReplaceLine(good, 259, absl::StrCat(Base64("ab"), " 259"))),
              HasSubstr("bad.tiktoken:260: token 'ab' duplicates rank 256 (line 257)"));
  EXPECT_THAT(LoadError(ReplaceLine(good, 259, absl::StrCat(Base64("zz"), " 900"))),
              HasSubstr("bad.tiktoken:260: rank 900 is out of range"));
  EXPECT_THAT(LoadError(ReplaceLine(good, 65, absl::StrCat(Base64("AA"), " 65"))),
              HasSubstr("no token for the single byte 0x41"));
  EXPECT_THAT(LoadError(""), HasSubstr("bad.tiktoken: no tokens"));
  EXPECT_THAT(LoadError("\n\n"), HasSubstr("bad.tiktoken: no tokens"));
}

TEST(TiktokenLoadTest, MissingFileIsNotFound) {
  auto tok = TiktokenTokenizer::Load("/nonexistent/tokenizer.model", MiniOptions());
  EXPECT_EQ(tok.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(tok.status().message()), HasSubstr("/nonexistent/tokenizer.model"));
}

TEST(TiktokenLoadTest, CrLfLinesAreAccepted) {
  std::string file = MiniFile();
  std::string crlf;
  for (char c : file) crlf += c == '\n' ? std::string("\r\n") : std::string(1, c);
  auto tok = TiktokenTokenizer::FromString(crlf, "crlf.tiktoken", MiniOptions());
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_THAT((*tok)->Encode("abcd", false, false), ElementsAre(258));
}

}  // namespace
}  // namespace cctune
