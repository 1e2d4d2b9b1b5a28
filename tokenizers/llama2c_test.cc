#include "tokenizers/llama2c.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/util/shared_dir.h"
#include "tokenizers/sentencepiece.h"
#include "tokenizers/sentencepiece_model.h"
#include "tokenizers/test_vectors.h"

namespace cctune {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// ---- Building .bin files in memory. ----

void AppendI32(std::string* out, int32_t v) { out->append(reinterpret_cast<const char*>(&v), 4); }
void AppendF32(std::string* out, float v) { out->append(reinterpret_cast<const char*>(&v), 4); }

struct Token {
  std::string text;
  float score;
};

std::string MakeBin(const std::vector<Token>& tokens, int32_t max_len = -1) {
  int32_t longest = 0;
  for (const auto& t : tokens) longest = std::max<int32_t>(longest, t.text.size());
  std::string out;
  AppendI32(&out, max_len >= 0 ? max_len : longest);
  for (const auto& t : tokens) {
    AppendF32(&out, t.score);
    AppendI32(&out, static_cast<int32_t>(t.text.size()));
    out += t.text;
  }
  return out;
}

// llama2.c's tokenizer export: SentencePiece pieces with U+2581 as a space, BOS and EOS
// spelled "\n<s>\n" and "\n</s>\n".
std::string BinFromSentencePiece(const SentencePieceModel& sp) {
  std::vector<Token> tokens;
  for (size_t id = 0; id < sp.pieces.size(); ++id) {
    std::string t = sp.pieces[id].piece;
    if (t == sp.bos_piece) t = "\n<s>\n";
    if (t == sp.eos_piece) t = "\n</s>\n";
    std::string spaced;
    for (size_t i = 0; i < t.size();) {
      if (t.compare(i, 3, "\xE2\x96\x81") == 0) {
        spaced += ' ';
        i += 3;
      } else {
        spaced += t[i++];
      }
    }
    tokens.push_back({spaced, sp.pieces[id].score});
  }
  return MakeBin(tokens);
}

// run.c's encode() transcribed plainly (rescan all pairs after each merge), as the reference.
std::vector<int32_t> RunCEncode(const Llama2cTokenizer& tok, const std::string& text) {
  auto find = [&](const std::string& s) {
    for (int32_t id = 0; id < tok.vocab_size(); ++id) {
      if (tok.piece(id) == s) return id;
    }
    return -1;
  };
  std::vector<int32_t> tokens;
  if (!text.empty()) tokens.push_back(find(" "));
  std::string buffer;
  for (size_t i = 0; i < text.size(); ++i) {
    if ((static_cast<uint8_t>(text[i]) & 0xC0) != 0x80) buffer.clear();
    buffer += text[i];
    if (i + 1 < text.size() && (static_cast<uint8_t>(text[i + 1]) & 0xC0) == 0x80 &&
        buffer.size() < 4) {
      continue;
    }
    const int32_t id = find(buffer);
    if (id != -1) {
      tokens.push_back(id);
    } else {
      for (char c : buffer) tokens.push_back(static_cast<uint8_t>(c) + 3);
    }
    buffer.clear();
  }
  while (true) {
    float best_score = -1e10f;
    int32_t best_id = -1, best_idx = -1;
    for (size_t i = 0; i + 1 < tokens.size(); ++i) {
      const int32_t id = find(tok.piece(tokens[i]) + tok.piece(tokens[i + 1]));
      if (id != -1 && tok.score(id) > best_score) {
        best_score = tok.score(id);
        best_id = id;
        best_idx = static_cast<int32_t>(i);
      }
    }
    if (best_idx == -1) break;
    tokens[best_idx] = best_id;
    tokens.erase(tokens.begin() + best_idx + 1);
  }
  return tokens;
}

std::unique_ptr<Llama2cTokenizer> LoadTok512OrNull(std::string* why) {
  auto path = cctune::testing::SharedFile("models/stories260K/tok512.bin");
  if (!path.ok()) {
    *why = path.status().ToString();
    return nullptr;
  }
  auto tok = Llama2cTokenizer::Load(*path, 512);
  CCTUNE_CHECK_OK(tok);
  return std::move(*tok);
}

#define TOK512_OR_SKIP(var)                    \
  std::string why_##var;                       \
  auto var = LoadTok512OrNull(&why_##var);     \
  if (var == nullptr) GTEST_SKIP() << why_##var

TEST(Llama2cTest, Tok512Header) {
  TOK512_OR_SKIP(tok);
  EXPECT_EQ(tok->vocab_size(), 512);
  EXPECT_EQ(tok->max_token_length(), 7);
  EXPECT_EQ(tok->piece(1), "\n<s>\n");
  EXPECT_EQ(tok->piece(3), "<0x00>");
  EXPECT_THAT(tok->stop_tokens(), ElementsAre(2, 1));
}

// run.c -i "Zoo": BOS, the dummy prefix " " (410), "Z" (469), "oo" (347). The same ids come
// from SentencePiece on the equivalent tok512.model, and greedy_zoo_steps60.txt, run.c's
// output, starts with their decoded text.
TEST(Llama2cTest, ZooPromptLikeRunC) {
  TOK512_OR_SKIP(tok);
  const std::vector<int32_t> ids = tok->Encode("Zoo", /*add_bos=*/true, /*add_eos=*/false);
  EXPECT_THAT(ids, ElementsAre(1, 410, 469, 347));
  EXPECT_EQ(tok->piece(410), " ");
  auto sp_path = cctune::testing::SharedFile("models/stories260K/tok512.model");
  ASSERT_TRUE(sp_path.ok());
  auto sp = SentencePieceTokenizer::Load(*sp_path);
  ASSERT_TRUE(sp.ok());
  EXPECT_EQ((*sp)->Encode("Zoo", true, false), ids);
  // run.c prints decode(prev, next) for each prompt token after BOS.
  std::string printed;
  for (size_t i = 1; i < ids.size(); ++i) printed += *tok->DecodePiece(ids[i], ids[i - 1]);
  EXPECT_EQ(printed, "Zoo");
  auto ref_path = cctune::testing::SharedFile("models/stories260K/reference/greedy_zoo_steps60.txt");
  ASSERT_TRUE(ref_path.ok());
  auto ref = cctune::testing::ReadTestFile(*ref_path);
  ASSERT_TRUE(ref.ok());
  EXPECT_THAT(*ref, StartsWith("Zoo was"));
}

// greedy_steps200.txt is run.c's stdout: the 200 sampled pieces (decoded after BOS) and the
// newline run.c prints after the loop; "achieved tok/s" went to stderr. Compare the text
// with that final newline removed.
TEST(Llama2cTest, DecodesRunCGreedyOutputExactly) {
  TOK512_OR_SKIP(tok);
  auto ids_path = cctune::testing::SharedFile(
      "models/stories260K/reference/greedy_steps200_token_ids.json");
  auto txt_path = cctune::testing::SharedFile("models/stories260K/reference/greedy_steps200.txt");
  if (!ids_path.ok() || !txt_path.ok()) GTEST_SKIP() << "reference files missing";
  const nlohmann::json j = nlohmann::json::parse(*cctune::testing::ReadTestFile(*ids_path));
  const std::vector<int32_t> ids = j["token_ids_after_bos"].get<std::vector<int32_t>>();
  ASSERT_EQ(ids.size(), 200u);
  std::string expected = *cctune::testing::ReadTestFile(*txt_path);
  ASSERT_FALSE(expected.empty());
  ASSERT_EQ(expected.back(), '\n');
  expected.pop_back();
  // As run.c streams it: each piece decoded after its predecessor, starting after BOS.
  std::string streamed;
  int32_t prev = 1;
  for (int32_t id : ids) {
    streamed += *tok->DecodePiece(id, prev);
    prev = id;
  }
  EXPECT_EQ(streamed, expected);
  std::vector<int32_t> with_bos = {1};
  with_bos.insert(with_bos.end(), ids.begin(), ids.end());
  EXPECT_EQ(*tok->Decode(with_bos), expected);
  EXPECT_EQ(*tok->Decode(ids), expected);
}

TEST(Llama2cTest, HeapMergeMatchesRunCOnRandomText) {
  TOK512_OR_SKIP(tok);
  Generator gen(23);
  const std::vector<std::string> atoms = {"a", "b", "e", "h", "t", " ", " ", "the", "ing",
                                          "\n", "Z", "o", ".", ",", "\xC3\xA9", "\xE4\xB8\xAD",
                                          "\xF0\x9F\xA6\x99", "\x80", "1", "'"};
  for (int trial = 0; trial < 300; ++trial) {
    std::string text;
    const size_t n = gen.UniformInt(40);
    for (size_t i = 0; i < n; ++i) text += atoms[gen.UniformInt(atoms.size())];
    ASSERT_EQ(tok->Encode(text, false, false), RunCEncode(*tok, text)) << text;
  }
}

// The tok512 fixture was made by SentencePiece on tok512.model; run.c agrees wherever
// SentencePiece's normaliser (which drops extra white space) left the text alone.
TEST(Llama2cTest, Tok512MatchesSentencePieceFixture) {
  TOK512_OR_SKIP(tok);
  auto fixture = cctune::testing::LoadTokenizerFixture("tok512_cases.json");
  ASSERT_TRUE(fixture.ok()) << fixture.status();
  int compared = 0, matched = 0;
  for (const auto& c : fixture->cases) {
    if (c.normalized) continue;
    ++compared;
    const std::vector<int32_t> ids = tok->Encode(c.text, false, false);
    EXPECT_EQ(ids, c.ids) << "'" << c.text << "'";
    matched += ids == c.ids;
  }
  EXPECT_GT(compared, 300);
  EXPECT_EQ(matched, compared);
}

// llama2.c's export of Meta's Llama 2 tokenizer, rebuilt here from tokenizer.model: run.c's
// algorithm must reproduce SentencePiece's ids on the shared vectors and the fixture.
TEST(Llama2cTest, Llama2ExportMatchesSentencePiece) {
  auto sp_path = cctune::testing::SharedFile("tokenizers/llama2/tokenizer.model");
  if (!sp_path.ok()) GTEST_SKIP() << sp_path.status();
  auto sp = ReadSentencePieceModel(*sp_path);
  ASSERT_TRUE(sp.ok()) << sp.status();
  auto tok = Llama2cTokenizer::FromString(BinFromSentencePiece(*sp), "llama2.bin", 32000);
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto vectors = cctune::testing::LoadSharedVocabVectors("tokenizers/llama2");
  ASSERT_TRUE(vectors.ok());
  int matched = 0;
  for (const auto& c : *vectors) {
    const std::vector<int32_t> ids = (*tok)->Encode(c.text, false, false);
    EXPECT_EQ(ids, c.ids) << "'" << c.text << "'";
    matched += ids == c.ids;
  }
  EXPECT_EQ(matched, 46);
  std::printf("llama2 vocab vectors through llama2.c's algorithm: %d/46 match\n", matched);
  auto fixture = cctune::testing::LoadTokenizerFixture("llama2_cases.json");
  ASSERT_TRUE(fixture.ok());
  for (const auto& c : fixture->cases) {
    EXPECT_EQ((*tok)->Encode(c.text, false, false), c.ids) << "'" << c.text << "'";
  }
}

// ---- Loader errors on small synthetic files. ----

std::vector<Token> MiniVocab() {
  std::vector<Token> v = {{"<unk>", 0}, {"\n<s>\n", 0}, {"\n</s>\n", 0}};
  for (int b = 0; b < 256; ++b) {
    char hex[8];
    std::snprintf(hex, sizeof(hex), "<0x%02X>", b);
    v.push_back({hex, 0});
  }
  v.push_back({" ", -1});
  v.push_back({"a", -2});
  v.push_back({"b", -3});
  v.push_back({"ab", -4});
  v.push_back({" ab", -5});
  return v;
}

TEST(Llama2cLoadTest, MiniVocabularyEncodesAndDecodes) {
  auto tok = Llama2cTokenizer::FromString(MakeBin(MiniVocab()), "mini.bin");
  ASSERT_TRUE(tok.ok()) << tok.status();
  // " ab" merges fully; "c" is not in the vocabulary: byte token 'c' + 3.
  EXPECT_THAT((*tok)->Encode("abc", true, true), ElementsAre(1, 263, 'c' + 3, 2));
  EXPECT_EQ(*(*tok)->Decode({1, 263, 'c' + 3, 2}), "abc");
  EXPECT_EQ(*(*tok)->DecodePiece(263, 5), " ab");
  EncodeOptions trim;
  trim.trim_leading_whitespace = true;
  EXPECT_THAT((*tok)->Encode("ab", trim), ElementsAre(262));
  EXPECT_FALSE((*tok)->Decode({264}).ok());
}

std::string LoadError(const std::string& bytes, int32_t expected_vocab = 0) {
  auto tok = Llama2cTokenizer::FromString(bytes, "bad.bin", expected_vocab);
  EXPECT_FALSE(tok.ok());
  return tok.ok() ? "" : std::string(tok.status().message());
}

TEST(Llama2cLoadTest, TruncatedAndInconsistentFilesNameFileTokenAndOffset) {
  const std::string good = MakeBin(MiniVocab());
  EXPECT_THAT(LoadError(good.substr(0, 2)), HasSubstr("bad.bin: truncated"));
  // Cut inside token 3's header (4 + 3 tokens of 8 + 5/6/7 bytes = 46 bytes in).
  const size_t token3 = 4 + (8 + 5) + (8 + 5) + (8 + 6);
  EXPECT_THAT(LoadError(good.substr(0, token3 + 5)),
              HasSubstr(absl::StrCat("bad.bin: truncated at token 3 (byte offset ", token3, ")")));
  EXPECT_THAT(LoadError(good.substr(0, token3 + 8 + 3)),
              HasSubstr(absl::StrCat("truncated at token 3 (byte offset ", token3 + 8,
                                     "): need 6 bytes, 3 left")));
  EXPECT_THAT(LoadError(MakeBin(MiniVocab(), 3)), HasSubstr("token 0 (byte offset 8) has length 5"));
  EXPECT_THAT(LoadError(MakeBin(MiniVocab(), 0)), HasSubstr("max_token_length 0"));
  EXPECT_THAT(LoadError(good, 300), HasSubstr("has 264 tokens, the model expects 300"));
  EXPECT_THAT(LoadError(good, 100), HasSubstr("left after the 100 tokens"));
  std::string negative = good.substr(0, 4);
  AppendF32(&negative, 0.f);
  AppendI32(&negative, -7);
  EXPECT_THAT(LoadError(negative), HasSubstr("has length -7"));
  auto missing = Llama2cTokenizer::Load("/nonexistent/tok.bin");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
}

TEST(Llama2cLoadTest, EveryTruncationOfTok512IsAnErrorNotACrash) {
  TOK512_OR_SKIP(tok);
  auto path = cctune::testing::SharedFile("models/stories260K/tok512.bin");
  const std::string bytes = *cctune::testing::ReadTestFile(*path);
  int errors = 0;
  for (size_t cut = 0; cut < bytes.size(); cut += 7) {
    auto t = Llama2cTokenizer::FromString(bytes.substr(0, cut), "tok512.bin", 512);
    errors += !t.ok();
  }
  EXPECT_EQ(errors, static_cast<int>((bytes.size() + 6) / 7));
}

}  // namespace
}  // namespace cctune
