#include "tokenizers/prompt_template.h"

#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/shared_dir.h"
#include "tokenizers/sentencepiece.h"
#include "tokenizers/test_vectors.h"
#include "tokenizers/tiktoken.h"

namespace cctune {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

Message Msg(Role role, std::string content, bool masked) {
  Message m;
  m.role = role;
  m.content = std::move(content);
  m.masked = masked;
  return m;
}

std::vector<int32_t> Concat(std::initializer_list<std::vector<int32_t>> parts) {
  std::vector<int32_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

class Llama3PromptTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto path = cctune::testing::SharedFile("tokenizers/llama3/tokenizer.model");
    if (!path.ok()) GTEST_SKIP() << path.status();
    auto tok = MakeLlama3Tokenizer(*path);
    ASSERT_TRUE(tok.ok()) << tok.status();
    tok_ = std::move(*tok);
  }
  // The reference: the whole conversation written out as text and encoded in one go with
  // special-token parsing.
  std::vector<int32_t> EncodeText(const std::string& text) const {
    EncodeOptions o;
    o.parse_special = true;
    return tok_->Encode(text, o);
  }
  std::unique_ptr<Tokenizer> tok_;
};

TEST_F(Llama3PromptTest, ChatMatchesTheWrittenOutFormat) {
  const std::vector<Message> messages = {
      Msg(Role::kSystem, "You are a helpful assistant.", true),
      Msg(Role::kUser, "  What is 2+2?\n", true),
      Msg(Role::kAssistant, "It is 4.", false),
  };
  auto t = TokenizeMessages(*tok_, PromptFormat::kLlama3Chat, messages);
  ASSERT_TRUE(t.ok()) << t.status();
  const std::string text =
      "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are a helpful "
      "assistant.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWhat is "
      "2+2?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nIt is "
      "4.<|eot_id|><|end_of_text|>";
  EXPECT_EQ(t->tokens, EncodeText(text));
  ASSERT_EQ(t->mask.size(), t->tokens.size());
  // Masked: BOS, the system and user messages, and the final EOS; the answer is trained on.
  const std::vector<int32_t> answer = Concat(
      {{128006}, tok_->Encode("assistant", false, false), {128007, 271},
       tok_->Encode("It is 4.", false, false), {128009}});
  const size_t answer_start = t->tokens.size() - 1 - answer.size();
  for (size_t i = 0; i < t->tokens.size(); ++i) {
    const bool in_answer = i >= answer_start && i + 1 < t->tokens.size();
    EXPECT_EQ(t->mask[i], in_answer ? 0 : 1) << i;
  }
  EXPECT_EQ(std::vector<int32_t>(t->tokens.begin() + answer_start, t->tokens.end() - 1), answer);
}

TEST_F(Llama3PromptTest, InferencePromptOpensTheAssistantTurn) {
  const std::vector<Message> messages = {Msg(Role::kUser, "Tell me a story.", false)};
  auto ids = InferencePrompt(*tok_, PromptFormat::kLlama3Chat, messages);
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, EncodeText("<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\n"
                             "Tell me a story.<|eot_id|><|start_header_id|>assistant"
                             "<|end_header_id|>\n\n"));
}

TEST_F(Llama3PromptTest, ToolCallsUseEomAndPythonTag) {
  Message call = Msg(Role::kAssistant, "print(1)", false);
  call.ipython = true;
  call.eot = false;
  const std::vector<Message> messages = {Msg(Role::kUser, "Run it", true), call,
                                         Msg(Role::kIpython, "1", true)};
  auto t = TokenizeMessages(*tok_, PromptFormat::kLlama3Chat, messages);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->tokens,
            EncodeText("<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nRun "
                       "it<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"
                       "<|python_tag|>print(1)<|eom_id|><|start_header_id|>ipython"
                       "<|end_header_id|>\n\n1<|eot_id|><|end_of_text|>"));
}

TEST_F(Llama3PromptTest, MaxSeqLenTruncatesToEos) {
  const std::vector<Message> messages = {Msg(Role::kUser, "one two three four five six", true),
                                         Msg(Role::kAssistant, "seven eight nine ten", false)};
  TokenizeMessagesOptions options;
  options.max_seq_len = 9;
  auto t = TokenizeMessages(*tok_, PromptFormat::kLlama3Chat, messages, options);
  ASSERT_TRUE(t.ok());
  auto full = TokenizeMessages(*tok_, PromptFormat::kLlama3Chat, messages);
  ASSERT_EQ(t->tokens.size(), 9u);
  ASSERT_EQ(t->mask.size(), 9u);
  EXPECT_EQ(std::vector<int32_t>(t->tokens.begin(), t->tokens.end() - 1),
            std::vector<int32_t>(full->tokens.begin(), full->tokens.begin() + 8));
  EXPECT_EQ(t->tokens.back(), 128001);
  EXPECT_EQ(t->mask.back(), 1);
  options.max_seq_len = -1;
  EXPECT_FALSE(TokenizeMessages(*tok_, PromptFormat::kLlama3Chat, messages, options).ok());
}

TEST_F(Llama3PromptTest, NoneConcatenatesContents) {
  const std::vector<Message> messages = {Msg(Role::kUser, "Hello ", true),
                                         Msg(Role::kAssistant, "world", false)};
  auto t = TokenizeMessages(*tok_, PromptFormat::kNone, messages);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->tokens, Concat({{128000}, tok_->Encode("Hello", false, false),
                               tok_->Encode("world", false, false), {128001}}));
  EXPECT_THAT(t->mask, ElementsAre(1, 1, 0, 0));
}

class Llama2PromptTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto path = cctune::testing::SharedFile("tokenizers/llama2/tokenizer.model");
    if (!path.ok()) GTEST_SKIP() << path.status();
    auto tok = MakeLlama2Tokenizer(*path);
    ASSERT_TRUE(tok.ok()) << tok.status();
    tok_ = std::move(*tok);
  }
  std::unique_ptr<Tokenizer> tok_;
};

// Reference: Meta's chat_completion encodes each exchange as one string,
// "[INST] {user} [/INST] {answer}", with BOS and EOS.
TEST_F(Llama2PromptTest, ChatMatchesMetasFormat) {
  const std::vector<Message> messages = {
      Msg(Role::kSystem, "Answer briefly.", true), Msg(Role::kUser, "Capital of France?", true),
      Msg(Role::kAssistant, "Paris.", false), Msg(Role::kUser, "And of Italy?", true),
      Msg(Role::kAssistant, "Rome.", false)};
  auto t = TokenizeMessages(*tok_, PromptFormat::kLlama2Chat, messages);
  ASSERT_TRUE(t.ok()) << t.status();
  const std::vector<int32_t> expected = Concat(
      {tok_->Encode("[INST] <<SYS>>\nAnswer briefly.\n<</SYS>>\n\nCapital of France? [/INST] "
                    "Paris.",
                    true, true),
       tok_->Encode("[INST] And of Italy? [/INST] Rome.", true, true)});
  EXPECT_EQ(t->tokens, expected);
  // Each turn: BOS and the question masked, the answer and its EOS not.
  const std::vector<int32_t> q1 = tok_->Encode(
      "[INST] <<SYS>>\nAnswer briefly.\n<</SYS>>\n\nCapital of France? [/INST]", true, false);
  const std::vector<int32_t> a1 = tok_->Encode("Paris.", false, true);
  ASSERT_EQ(t->mask.size(), t->tokens.size());
  for (size_t i = 0; i < q1.size(); ++i) EXPECT_EQ(t->mask[i], 1) << i;
  for (size_t i = q1.size(); i < q1.size() + a1.size(); ++i) EXPECT_EQ(t->mask[i], 0) << i;
  EXPECT_EQ(t->mask[q1.size() + a1.size()], 1);  // the second turn's BOS
  auto prompt = InferencePrompt(*tok_, PromptFormat::kLlama2Chat,
                                {Msg(Role::kUser, "Capital of France?", false)});
  ASSERT_TRUE(prompt.ok());
  EXPECT_EQ(*prompt, tok_->Encode("[INST] Capital of France? [/INST]", true, false));
}

// torchtune's documented property: messages encoded one at a time concatenate like the
// joined text.
TEST_F(Llama2PromptTest, NoneSplicesMessagesLikeTheJoinedText) {
  const std::vector<Message> messages = {Msg(Role::kSystem, "system message\n", true),
                                         Msg(Role::kUser, "user prompt\n", true),
                                         Msg(Role::kAssistant, "assistant response\n", false)};
  auto t = TokenizeMessages(*tok_, PromptFormat::kNone, messages);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->tokens,
            tok_->Encode("system message\nuser prompt\nassistant response\n", true, true));
}

TEST_F(Llama2PromptTest, Llama3FormatNeedsLlama3SpecialTokens) {
  auto t = TokenizeMessages(*tok_, PromptFormat::kLlama3Chat, {Msg(Role::kUser, "hi", false)});
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("<|start_header_id|>"));
}

TEST(PromptFormatTest, ParseNames) {
  EXPECT_EQ(*ParsePromptFormat("llama3_chat"), PromptFormat::kLlama3Chat);
  EXPECT_EQ(*ParsePromptFormat("llama2_chat"), PromptFormat::kLlama2Chat);
  EXPECT_EQ(*ParsePromptFormat("none"), PromptFormat::kNone);
  EXPECT_EQ(*ParsePromptFormat("mistral_chat"), PromptFormat::kMistralChat);
  EXPECT_EQ(*ParsePromptFormat("qwen2_5_chat"), PromptFormat::kQwen2_5Chat);
  EXPECT_STREQ(PromptFormatName(PromptFormat::kQwen2_5Chat), "qwen2_5_chat");
  EXPECT_THAT(std::string(ParsePromptFormat("chatml").status().message()),
              HasSubstr("unknown prompt format 'chatml'"));
  EXPECT_EQ(*ParseRole("ipython"), Role::kIpython);
  EXPECT_STREQ(RoleName(Role::kAssistant), "assistant");
  EXPECT_FALSE(ParseRole("tool").ok());
}

}  // namespace
}  // namespace cctune

namespace cctune {
namespace {

// torchtune's MistralTokenizer.tokenize_messages (MistralChatTemplate, then
// tokenize_messages_no_special_tokens), from tools/golden/gen_qwen_mistral_fixtures.py: on the
// committed sp_bpe.model always, on ../shared's Llama 2 tokenizer (Mistral v0.1's kind) when
// present.
void ExpectMistralChatMatches(const std::string& model_path, const std::string& key) {
  auto tok = SentencePieceTokenizer::Load(model_path);
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto cases = cctune::testing::LoadChatCases("mistral_cases.json", key);
  ASSERT_TRUE(cases.ok()) << cases.status();
  ASSERT_GE(cases->size(), 15u);
  for (size_t i = 0; i < cases->size(); ++i) {
    const auto& c = (*cases)[i];
    std::vector<Message> messages;
    for (const auto& m : c.messages) {
      auto role = ParseRole(m.role);
      ASSERT_TRUE(role.ok());
      messages.push_back(Msg(*role, m.content, m.masked));
    }
    TokenizeMessagesOptions options;
    options.max_seq_len = c.max_seq_len;
    auto got = TokenizeMessages(**tok, PromptFormat::kMistralChat, messages, options);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(got->tokens, c.ids) << key << " case " << i;
    EXPECT_EQ(got->mask, c.mask) << key << " case " << i;
  }
}

TEST(MistralPromptTest, MatchesTorchtuneOnTheCommittedModel) {
  auto path = cctune::testing::TokenizerFixturePath("sp_bpe.model");
  ASSERT_TRUE(path.ok());
  ExpectMistralChatMatches(*path, "sp_bpe.model");
}

TEST(MistralPromptTest, MatchesTorchtuneOnTheLlama2Tokenizer) {
  auto path = cctune::testing::SharedFile("tokenizers/llama2/tokenizer.model");
  if (!path.ok()) GTEST_SKIP() << path.status();
  ExpectMistralChatMatches(*path, "shared:tokenizers/llama2/tokenizer.model");
}

TEST(MistralPromptTest, SystemPromptsAreAnError) {
  auto path = cctune::testing::TokenizerFixturePath("sp_bpe.model");
  ASSERT_TRUE(path.ok());
  auto tok = SentencePieceTokenizer::Load(*path);
  ASSERT_TRUE(tok.ok());
  auto got = TokenizeMessages(**tok, PromptFormat::kMistralChat,
                              {Msg(Role::kSystem, "be nice", true), Msg(Role::kUser, "hi", true)});
  ASSERT_FALSE(got.ok());
  EXPECT_THAT(got.status().message(), HasSubstr("system prompts are not supported"));
  got = TokenizeMessages(**tok, PromptFormat::kQwen2_5Chat, {Msg(Role::kUser, "hi", true)});
  ASSERT_FALSE(got.ok());
  EXPECT_THAT(got.status().message(),
              HasSubstr("qwen2_5_chat needs the special token <|im_start|>"));
}

}  // namespace
}  // namespace cctune
