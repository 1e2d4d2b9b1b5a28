#include "tokenizers/byte_level_bpe.h"

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tokenizers/prompt_template.h"
#include "tokenizers/test_vectors.h"
#include "tokenizers/utf8.h"

namespace cctune {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string Fixture(const std::string& name) {
  auto path = cctune::testing::TokenizerFixturePath(name);
  CCTUNE_CHECK_OK(path);
  return *path;
}

// The committed fixture: a 1000-token byte-level BPE trained with Qwen2's settings, with
// Qwen2.5's special tokens from its tokenizer.json (ids 1000..1021).
std::unique_ptr<ByteLevelBpeTokenizer> FixtureTokenizer(bool hf_specials = true) {
  auto tok = MakeQwen2_5Tokenizer(Fixture("qwen_bpe_vocab.json"), Fixture("qwen_bpe_merges.txt"),
                                  hf_specials ? Fixture("qwen_bpe_tokenizer.json") : "");
  CCTUNE_CHECK_OK(tok);
  return *std::move(tok);
}

TEST(ByteLevelBpeTest, EveryReferenceEncodingMatches) {
  auto tok = FixtureTokenizer();
  auto fixture = cctune::testing::LoadTokenizerFixture("qwen_cases.json");
  ASSERT_TRUE(fixture.ok()) << fixture.status();
  ASSERT_GT(fixture->cases.size(), 300u);
  int matched = 0;
  for (const auto& c : fixture->cases) {
    const std::vector<int32_t> ids = tok->Encode(c.text, false, false);
    EXPECT_EQ(ids, c.ids) << "'" << c.text << "'";
    matched += ids == c.ids;
  }
  EXPECT_EQ(matched, static_cast<int>(fixture->cases.size()));
}

TEST(ByteLevelBpeTest, EveryReferenceDecodingMatches) {
  auto tok = FixtureTokenizer();
  auto fixture = cctune::testing::LoadTokenizerFixture("qwen_cases.json");
  ASSERT_TRUE(fixture.ok()) << fixture.status();
  ASSERT_GT(fixture->decode_cases.size(), 200u);
  for (const auto& c : fixture->decode_cases) {
    auto text = tok->Decode(c.ids);
    ASSERT_TRUE(text.ok()) << text.status();
    EXPECT_EQ(*text, c.text);
    // Streaming pieces concatenate to the same bytes before U+FFFD replacement.
    std::string streamed;
    for (size_t i = 0; i < c.ids.size(); ++i) {
      auto piece = tok->DecodePiece(c.ids[i], i == 0 ? -1 : c.ids[i - 1]);
      ASSERT_TRUE(piece.ok());
      streamed += *piece;
    }
    EXPECT_EQ(ReplaceInvalidUtf8(streamed), c.text);
  }
}

TEST(ByteLevelBpeTest, DecodeInvertsEncodeUpToNfc) {
  auto tok = FixtureTokenizer();
  Generator rng(5);
  const std::vector<std::string> alphabet = {"a", "Z", " ", "  ", "\n", "\t", "'s", "9", "é",
                                             "e\xCC\x81", "中", "\xF0\x9F\x99\x82", "<|im_end|>",
                                             "\xC2\x85", "."};
  for (int i = 0; i < 300; ++i) {
    std::string text;
    const int n = 1 + static_cast<int>(rng.UniformInt(40));
    for (int k = 0; k < n; ++k) text += alphabet[rng.UniformInt(alphabet.size())];
    auto back = tok->Decode(tok->Encode(text, false, false));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, NormalizeNfc(text));
  }
}

TEST(ByteLevelBpeTest, PreTokenizerSplitsDigitsSinglyAndKeepsContractions) {
  auto tok = FixtureTokenizer();
  EXPECT_THAT(tok->PreTokenize("x 12345"), ElementsAre("x", " ", "1", "2", "3", "4", "5"));
  EXPECT_THAT(tok->PreTokenize("I'M  here\n\n"), ElementsAre("I", "'M", " ", " here", "\n\n"));
}

TEST(ByteLevelBpeTest, QwenSpecialTokensAndIds) {
  auto tok = FixtureTokenizer(/*hf_specials=*/false);
  EXPECT_EQ(tok->SpecialTokenId("<|endoftext|>"), 151643);
  EXPECT_EQ(tok->SpecialTokenId("<|im_start|>"), 151644);
  EXPECT_EQ(tok->SpecialTokenId("<|im_end|>"), 151645);
  EXPECT_EQ(tok->SpecialTokenId("<tool_call>"), 151657);
  EXPECT_EQ(tok->SpecialTokenId("<|file_sep|>"), 151664);
  EXPECT_EQ(tok->vocab_size(), 151665);
  EXPECT_EQ(tok->bos_id(), -1);
  EXPECT_EQ(tok->eos_id(), 151645);
  EXPECT_EQ(tok->pad_id(), 151643);
  EXPECT_THAT(tok->stop_tokens(), ElementsAre(151645));
  EXPECT_EQ(tok->first_special_id(), 151643);
  // BOS is none: add_bos adds nothing; add_eos adds <|im_end|>.
  EXPECT_THAT(tok->Encode("a", true, true), ElementsAre(tok->Encode("a", false, false)[0], 151645));
  EXPECT_THAT(tok->Encode("<|im_start|>", false, false), ElementsAre(151644));
  // Ids between the vocabulary and the special tokens decode to an error naming them.
  auto gap = tok->Decode({5000});
  ASSERT_FALSE(gap.ok());
  EXPECT_THAT(gap.status().message(), HasSubstr("5000"));
  EXPECT_FALSE(tok->Decode({151665}).ok());
  EXPECT_FALSE(tok->Decode({-1}).ok());
}

TEST(ByteLevelBpeTest, NfcComposesAndInvalidUtf8BecomesReplacement) {
  EXPECT_EQ(NormalizeNfc("Cafe\xCC\x81"), "Caf\xC3\xA9");
  EXPECT_EQ(NormalizeNfc("plain ascii"), "plain ascii");
  EXPECT_EQ(NormalizeNfc("\xEF\xAC\x81"), "\xEF\xAC\x81");  // a ligature stays (NFC, not NFKC)
  auto tok = FixtureTokenizer();
  EXPECT_EQ(tok->Encode("Cafe\xCC\x81", false, false), tok->Encode("Caf\xC3\xA9", false, false));
  EXPECT_EQ(tok->Encode("a\xFF", false, false), tok->Encode("a\xEF\xBF\xBD", false, false));
}

TEST(ByteLevelBpeTest, LongPiecesAndThreadsAgree) {
  auto tok = FixtureTokenizer();
  std::string long_word;
  for (int i = 0; i < 5000; ++i) long_word += "thequickbrownfox"[i % 16];
  const std::vector<int32_t> once = tok->Encode(long_word, false, false);
  auto back = tok->Decode(once);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, long_word);
  EXPECT_LT(once.size(), long_word.size());
  // The piece cache is shared: several threads encoding the same texts get the same ids.
  std::vector<std::string> texts;
  for (int i = 0; i < 50; ++i) texts.push_back(absl::StrCat("hello world ", i, " don't ", i * 7));
  std::vector<std::vector<int32_t>> expected;
  for (const auto& t : texts) expected.push_back(tok->Encode(t, false, false));
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < 20; ++r) {
        for (size_t i = 0; i < texts.size(); ++i) {
          ok[t] += tok->Encode(texts[i], false, false) == expected[i];
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(ok[t], 20 * 50);
}

std::vector<Message> ToMessages(const std::vector<cctune::testing::ChatMessage>& in) {
  std::vector<Message> out;
  for (const auto& m : in) {
    Message msg;
    auto role = ParseRole(m.role);
    CCTUNE_CHECK_OK(role);
    msg.role = *role;
    msg.content = m.content;
    msg.masked = m.masked;
    msg.ipython = m.ipython;
    out.push_back(msg);
  }
  return out;
}

TEST(ByteLevelBpeTest, EveryReferenceChatLayoutAndMaskMatches) {
  auto tok = FixtureTokenizer();
  auto cases = cctune::testing::LoadChatCases("qwen_cases.json");
  ASSERT_TRUE(cases.ok()) << cases.status();
  ASSERT_GT(cases->size(), 30u);
  for (size_t i = 0; i < cases->size(); ++i) {
    const auto& c = (*cases)[i];
    TokenizeMessagesOptions options;
    options.max_seq_len = c.max_seq_len;
    options.add_end_tokens = c.add_end_tokens;
    options.truncate_left = c.truncate_left;
    auto got = TokenizeMessages(*tok, PromptFormat::kQwen2_5Chat, ToMessages(c.messages), options);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->tokens, c.ids) << "chat case " << i;
    EXPECT_EQ(got->mask, c.mask) << "chat case " << i;
  }
}

TEST(ByteLevelBpeTest, InferencePromptOpensTheAssistantTurn) {
  auto tok = FixtureTokenizer();
  Message user;
  user.content = "hi";
  auto ids = InferencePrompt(*tok, PromptFormat::kQwen2_5Chat, {user});
  ASSERT_TRUE(ids.ok());
  auto text = tok->Decode(*ids);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
}

ByteLevelBpeOptions TinyOptions() {
  ByteLevelBpeOptions o;
  o.special_tokens = {{"<|end|>", 300}};
  o.eos_token = "<|end|>";
  return o;
}

// A vocab.json with all 256 byte tokens (GPT-2's alphabet; byte b has id b) plus `extra`.
std::string TinyVocab(const std::string& extra) {
  std::string json = "{";
  uint32_t shifted = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    const uint32_t cp = printable ? b : 256 + shifted++;
    std::string utf8;
    AppendUtf8(cp, &utf8);
    if (utf8 == "\"" || utf8 == "\\") utf8 = "\\" + utf8;
    absl::StrAppend(&json, b == 0 ? "" : ",", "\"", utf8, "\":", b);
  }
  return absl::StrCat(json, extra, "}");
}

TEST(ByteLevelBpeTest, MergesApplyByRankNotByTokenId) {
  // "ab" then "abc" from ("ab","c"); "bc" exists with a better id but a worse rank.
  const std::string vocab = TinyVocab(",\"ab\":256,\"bc\":257,\"abc\":258");
  auto tok = ByteLevelBpeTokenizer::FromStrings(vocab, "v.json", "#version: 0.2\na b\nab c\nb c\n",
                                                "m.txt", TinyOptions());
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_THAT((*tok)->Encode("abc", false, false), ElementsAre(258));
  EXPECT_EQ((*tok)->num_merges(), 3);
  auto reordered = ByteLevelBpeTokenizer::FromStrings(vocab, "v.json", "b c\na b\nab c\n",
                                                      "m.txt", TinyOptions());
  ASSERT_TRUE(reordered.ok());
  EXPECT_THAT((*reordered)->Encode("abc", false, false), ElementsAre('a', 257));
}

TEST(ByteLevelBpeTest, BadFilesAreErrorsNamingTheEntry) {
  const std::string vocab = TinyVocab(",\"ab\":256");
  auto expect_error = [](const absl::StatusOr<std::unique_ptr<ByteLevelBpeTokenizer>>& r,
                         const std::string& part) {
    ASSERT_FALSE(r.ok());
    EXPECT_THAT(r.status().message(), HasSubstr(part));
  };
  const ByteLevelBpeOptions o = TinyOptions();
  expect_error(ByteLevelBpeTokenizer::FromStrings("[1]", "v.json", "", "m.txt", o), "v.json");
  expect_error(ByteLevelBpeTokenizer::FromStrings("{\"a\":0}", "v.json", "", "m.txt", o),
               "no token for byte");
  expect_error(ByteLevelBpeTokenizer::FromStrings(TinyVocab(",\"a b\":256"), "v.json", "", "m.txt", o),
               "not byte-level");
  expect_error(ByteLevelBpeTokenizer::FromStrings(vocab, "v.json", "a b c\n", "m.txt", o),
               "m.txt' line 1");
  expect_error(ByteLevelBpeTokenizer::FromStrings(vocab, "v.json", "a b\nb c\n", "m.txt", o),
               "line 2");
  expect_error(ByteLevelBpeTokenizer::FromStrings(TinyVocab(",\"ab\":255"), "v.json", "", "m.txt", o),
               "twice");
  ByteLevelBpeOptions clash = o;
  clash.special_tokens = {{"<|end|>", 256}};
  expect_error(ByteLevelBpeTokenizer::FromStrings(vocab, "v.json", "a b\n", "m.txt", clash),
               "already gives");
  ByteLevelBpeOptions unnamed = o;
  unnamed.eos_token = "<|nope|>";
  expect_error(ByteLevelBpeTokenizer::FromStrings(vocab, "v.json", "a b\n", "m.txt", unnamed),
               "<|nope|>");
  auto missing = MakeQwen2_5Tokenizer("/nonexistent/vocab.json", Fixture("qwen_bpe_merges.txt"), "");
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("/nonexistent/vocab.json"));
  auto bad_specials = ReadHfSpecialTokens(Fixture("qwen_bpe_vocab.json"));
  ASSERT_FALSE(bad_specials.ok());
  EXPECT_THAT(bad_specials.status().message(), HasSubstr("added_tokens"));
}

}  // namespace
}  // namespace cctune
