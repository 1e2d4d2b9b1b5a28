#include "tokenizers/byte_tokenizer.h"

#include <string>
#include <vector>

#include "core/random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tokenizers/prompt_template.h"
#include "tokenizers/utf8.h"

namespace cctune {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ByteTokenizerTest, EncodesBytesWithOptionalBosEos) {
  ByteTokenizer tok;
  EXPECT_THAT(tok.Encode("Hi!", false, false), ElementsAre('H', 'i', '!'));
  EXPECT_THAT(tok.Encode("Hi", true, true), ElementsAre(256, 'H', 'i', 257));
  EXPECT_THAT(tok.Encode("", true, false), ElementsAre(256));
  // Multi-byte UTF-8 gives one id per byte.
  EXPECT_THAT(tok.Encode("\xC3\xA9", false, false), ElementsAre(0xC3, 0xA9));
  EXPECT_EQ(tok.vocab_size(), 264);
  EXPECT_EQ(tok.pad_id(), 258);
}

TEST(ByteTokenizerTest, RandomBytesRoundTripThroughPiecesAndDecode) {
  ByteTokenizer tok;
  Generator gen(4);
  for (int trial = 0; trial < 50; ++trial) {
    std::string text(gen.UniformInt(200), '\0');
    for (char& c : text) c = static_cast<char>(gen.NextUint32());
    const std::vector<int32_t> ids = tok.Encode(text, true, true);
    ASSERT_EQ(ids.size(), text.size() + 2);
    std::string pieces;
    int32_t prev = -1;
    for (int32_t id : ids) {
      pieces += ValueOrDie(tok.DecodePiece(id, prev));
      prev = id;
    }
    EXPECT_EQ(pieces, text);  // raw bytes, BOS/EOS print nothing
    EXPECT_EQ(ValueOrDie(tok.Decode(ids)), ReplaceInvalidUtf8(text));
  }
}

TEST(ByteTokenizerTest, SpecialTokensParseOnlyWhenAsked) {
  ByteTokenizer tok;
  const std::string text = "a<|eot_id|>b<|nope|>";
  EncodeOptions plain;
  EXPECT_EQ(tok.Encode(text, plain).size(), text.size());
  EncodeOptions special;
  special.parse_special = true;
  const std::vector<int32_t> ids = tok.Encode(text, special);
  EXPECT_EQ(ids.size(), 1 + 1 + 1 + std::string("<|nope|>").size());
  EXPECT_EQ(ids[1], ByteTokenizer::kEot);
  EXPECT_EQ(ValueOrDie(tok.Decode(ids)), text);
  EXPECT_EQ(tok.SpecialTokenId("<|start_header_id|>"), 259);
  EXPECT_EQ(tok.SpecialTokenId("<|python_tag|>"), 263);
  EXPECT_FALSE(tok.SpecialTokenId("<|nope|>").has_value());
  EXPECT_THAT(tok.stop_tokens(), ElementsAre(257, 261, 262));
}

TEST(ByteTokenizerTest, OutOfRangeIdsAreErrors) {
  ByteTokenizer tok;
  EXPECT_THAT(std::string(tok.Decode({'a', 264}).status().message()), HasSubstr("264"));
  EXPECT_FALSE(tok.DecodePiece(-1, -1).ok());
}

TEST(ByteTokenizerTest, WorksWithTheLlama3ChatTemplate) {
  ByteTokenizer tok;
  std::vector<Message> messages(2);
  messages[0].role = Role::kUser;
  messages[0].content = "2+2?";
  messages[0].masked = true;
  messages[1].role = Role::kAssistant;
  messages[1].content = "4";
  auto t = TokenizeMessages(tok, PromptFormat::kLlama3Chat, messages);
  ASSERT_TRUE(t.ok()) << t.status();
  // <bos> <sh> user <eh> \n\n 2+2? <eot> <sh> assistant <eh> \n\n 4 <eot> <eos>
  std::vector<int32_t> want = {256, 259, 'u', 's', 'e', 'r',  260,  '\n', '\n', '2',
                               '+', '2', '?', 261, 259, 'a',  's',  's',  'i',  's',
                               't', 'a', 'n', 't', 260, '\n', '\n', '4',  261,  257};
  EXPECT_EQ(t->tokens, want);
  // Masked: BOS, the whole user turn, EOS.
  EXPECT_EQ(t->mask[13], 1);
  EXPECT_EQ(t->mask[27], 0);
  EXPECT_EQ(t->mask.back(), 1);
}

}  // namespace
}  // namespace cctune
