// cctune's own SentencePiece against libsentencepiece itself, id for id and byte for byte, on
// a few thousand random strings per model: multi-byte characters, runs of spaces, newlines,
// digits, emoji, model pieces glued together, text that looks like special pieces, and invalid
// UTF-8 (which our Tokenizer API first replaces with U+FFFD, so the reference is given the
// replaced text). Also decodes random id sequences (control, byte and unknown ids included).
// Models: Llama 2's and stories260K's tok512 from ../shared (skipped when absent) and the two
// committed fixtures (tools/golden/make_sentencepiece_fixture.py), also with UNUSED pieces. This binary links
// libsentencepiece and must not link libprotobuf.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/random.h"
#include "gtest/gtest.h"
#include "tests/util/shared_dir.h"
#include "tokenizers/sentencepiece.h"
#include "tokenizers/sentencepiece_model.h"
#include "tokenizers/sentencepiece_reference.h"
#include "tokenizers/test_vectors.h"
#include "tokenizers/utf8.h"

namespace cctune {
namespace {

using testing::ReferenceSentencePiece;

void AppendCodePoint(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// Words to glue into the random text: the model's own pieces with "▁" as a space, so that
// long merges and Viterbi paths are exercised, not only single characters.
std::vector<std::string> ModelWords(const SentencePieceModel& model) {
  std::vector<std::string> words;
  for (const auto& p : model.pieces) {
    std::string w;
    for (size_t i = 0; i < p.piece.size();) {
      if (p.piece.compare(i, 3, "\xE2\x96\x81") == 0) {
        w += ' ';
        i += 3;
      } else {
        w += p.piece[i++];
      }
    }
    words.push_back(w);
  }
  return words;
}

std::string RandomText(Generator& gen, const std::vector<std::string>& words) {
  static const char* const kSpecial[] = {
      "\xE2\x96\x81", "<s>", "</s>", "<unk>", "<pad>", "<0x41>", "<tool>", "[sep]", "<ctl>",
      "\xEF\xBF\xBD", " \xE2\x81\x87 ", "\r\n", "\t", "  \n  ", ".", ",", "!?", "'s", "(x)"};
  std::string s;
  const uint64_t parts = gen.UniformInt(14);
  for (uint64_t i = 0; i < parts; ++i) {
    switch (gen.UniformInt(13)) {
      case 0: {  // ASCII letters
        const uint64_t n = 1 + gen.UniformInt(8);
        for (uint64_t k = 0; k < n; ++k) s += static_cast<char>('a' + gen.UniformInt(26));
        break;
      }
      case 1:  // a run of spaces
        s.append(1 + gen.UniformInt(4), ' ');
        break;
      case 2:
        s += gen.UniformInt(2) ? "\n" : "\n\n";
        break;
      case 3:
        s += std::to_string(gen.UniformInt(1000000));
        break;
      case 4:  // 2-byte characters
        AppendCodePoint(0x80 + static_cast<uint32_t>(gen.UniformInt(0x800 - 0x80)), &s);
        break;
      case 5: {  // 3-byte: CJK or anything outside the surrogates
        uint32_t cp = gen.UniformInt(2) ? 0x4E00 + static_cast<uint32_t>(gen.UniformInt(0x5200))
                                        : 0x800 + static_cast<uint32_t>(gen.UniformInt(0xF800));
        if (cp >= 0xD800 && cp < 0xE000) cp = 0x3042;
        AppendCodePoint(cp, &s);
        break;
      }
      case 6:  // 4-byte: emoji or any supplementary plane
        AppendCodePoint(gen.UniformInt(2)
                            ? 0x1F300 + static_cast<uint32_t>(gen.UniformInt(0x700))
                            : 0x10000 + static_cast<uint32_t>(gen.UniformInt(0x100000)),
                        &s);
        break;
      case 7:
      case 8:
      case 9:
        s += words[gen.UniformInt(words.size())];
        break;
      case 10:
        s += kSpecial[gen.UniformInt(sizeof(kSpecial) / sizeof(kSpecial[0]))];
        break;
      case 11: {  // invalid UTF-8: a stray byte, a truncated sequence or a surrogate
        static const char* const kBad[] = {"\x80", "\xFF", "\xC3", "\xE2\x82", "\xF0\x9F\x98",
                                           "\xED\xA0\x80", "\xC0\xAF", "\xF5\x80\x80\x80"};
        s += kBad[gen.UniformInt(sizeof(kBad) / sizeof(kBad[0]))];
        break;
      }
      default:
        s += static_cast<char>(0x21 + gen.UniformInt(0x5E));  // ASCII punctuation and all
        break;
    }
  }
  return s;
}

std::string Printable(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c < 0x20 || c >= 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02X", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

void CompareWithReference(const std::string& path, int num_texts, uint64_t seed) {
  auto ours = SentencePieceTokenizer::Load(path);
  ASSERT_TRUE(ours.ok()) << ours.status();
  std::string error;
  auto ref = ReferenceSentencePiece::Load(path, &error);
  ASSERT_NE(ref, nullptr) << error;
  ASSERT_EQ((*ours)->vocab_size(), ref->piece_size());
  auto model = ReadSentencePieceModel(path);
  ASSERT_TRUE(model.ok());
  const std::vector<std::string> words = ModelWords(*model);

  Generator gen(seed);
  int encode_mismatches = 0, decode_mismatches = 0, total_ids = 0;
  for (int t = 0; t < num_texts; ++t) {
    const std::string text = RandomText(gen, words);
    const std::vector<int32_t> got = (*ours)->Encode(text, false, false);
    std::vector<int> want;
    ASSERT_TRUE(ref->Encode(ReplaceInvalidUtf8(text), &want, &error)) << error;
    total_ids += static_cast<int>(want.size());
    if (std::vector<int>(got.begin(), got.end()) != want) {
      if (++encode_mismatches <= 5) {
        ADD_FAILURE() << path << ": encode of \"" << Printable(text) << "\" differs";
      }
      continue;
    }
    auto decoded = (*ours)->Decode(got);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    std::string want_text;
    ASSERT_TRUE(ref->Decode(want, &want_text, &error)) << error;
    if (*decoded != want_text && ++decode_mismatches <= 5) {
      ADD_FAILURE() << path << ": decode of \"" << Printable(text) << "\" gives \""
                    << Printable(*decoded) << "\", libsentencepiece \"" << Printable(want_text)
                    << "\"";
    }
  }
  // Arbitrary id sequences, as a model may sample them.
  int id_mismatches = 0;
  const int vocab = ref->piece_size();
  for (int t = 0; t < num_texts / 2; ++t) {
    std::vector<int> ids(gen.UniformInt(12));
    for (int& id : ids) {
      // Bias towards the low ids, where control, unknown and byte pieces live.
      id = static_cast<int>(gen.UniformInt(2) ? gen.UniformInt(std::min(vocab, 300))
                                              : gen.UniformInt(vocab));
    }
    auto got = (*ours)->Decode(std::vector<int32_t>(ids.begin(), ids.end()));
    ASSERT_TRUE(got.ok());
    std::string want;
    ASSERT_TRUE(ref->Decode(ids, &want, &error)) << error;
    if (*got != want && ++id_mismatches <= 5) {
      std::string list;
      for (int id : ids) list += std::to_string(id) + " ";
      ADD_FAILURE() << path << ": decode of ids [" << list << "] gives \"" << Printable(*got)
                    << "\", libsentencepiece \"" << Printable(want) << "\"";
    }
  }
  EXPECT_EQ(encode_mismatches, 0);
  EXPECT_EQ(decode_mismatches, 0);
  EXPECT_EQ(id_mismatches, 0);
  std::printf("%s: %d texts (%d ids) and %d id sequences compared; mismatches: encode %d, "
              "decode %d, id decode %d\n",
              path.c_str(), num_texts, total_ids, num_texts / 2, encode_mismatches,
              decode_mismatches, id_mismatches);
}

TEST(SentencePieceReferenceTest, Llama2MatchesLibsentencepiece) {
  auto path = cctune::testing::SharedFile("tokenizers/llama2/tokenizer.model");
  if (!path.ok()) GTEST_SKIP() << "skipping Llama 2: " << path.status();
  CompareWithReference(*path, 3000, 1);
}

TEST(SentencePieceReferenceTest, Tok512MatchesLibsentencepiece) {
  auto path = cctune::testing::SharedFile("models/stories260K/tok512.model");
  if (!path.ok()) GTEST_SKIP() << "skipping stories260K tok512: " << path.status();
  CompareWithReference(*path, 3000, 2);
}

TEST(SentencePieceReferenceTest, FixtureBpeMatchesLibsentencepiece) {
  auto path = cctune::testing::TokenizerFixturePath("sp_bpe.model");
  ASSERT_TRUE(path.ok()) << path.status();
  CompareWithReference(*path, 4000, 3);
}

TEST(SentencePieceReferenceTest, FixtureUnigramMatchesLibsentencepiece) {
  auto path = cctune::testing::TokenizerFixturePath("sp_unigram.model");
  ASSERT_TRUE(path.ok()) << path.status();
  CompareWithReference(*path, 4000, 4);
}

// Hand-edited models with UNUSED pieces: BPE must resegment merges that went through them.
TEST(SentencePieceReferenceTest, FixturesWithUnusedPiecesMatchLibsentencepiece) {
  for (const char* name : {"sp_bpe_unused.model", "sp_unigram_unused.model"}) {
    auto path = cctune::testing::TokenizerFixturePath(name);
    ASSERT_TRUE(path.ok()) << path.status();
    CompareWithReference(*path, 3000, 5);
  }
}

}  // namespace
}  // namespace cctune
