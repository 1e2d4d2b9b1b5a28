#include "data/message_transforms.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cctune {
namespace {

using ::testing::HasSubstr;

std::string Msg(const absl::Status& s) { return std::string(s.message()); }

JsonRecords Records(const std::string& text) {
  auto r = ParseJsonRecords(text, "mem.jsonl");
  EXPECT_TRUE(r.ok()) << r.status();
  return *r;
}

// The Stanford Alpaca prompts, written out in full.
const char kWithInput[] =
    "Below is an instruction that describes a task, paired with an input that provides further "
    "context. Write a response that appropriately completes the request.\n\n### Instruction:\n"
    "Add.\n\n### Input:\n2 3\n\n### Response:\n";
const char kNoInput[] =
    "Below is an instruction that describes a task. Write a response that appropriately "
    "completes the request.\n\n### Instruction:\nAdd.\n\n### Response:\n";

TEST(InstructToMessagesTest, AlpacaPromptWithAndWithoutInput) {
  const JsonRecords r = Records(
      "{\"instruction\": \"Add.\", \"input\": \"2 3\", \"output\": \"5\"}\n"
      "{\"instruction\": \"Add.\", \"input\": \"\", \"output\": \"5\"}\n"
      "{\"instruction\": \"Add.\", \"output\": \"5\"}\n");
  InstructOptions o;
  for (size_t i = 0; i < 3; ++i) {
    auto m = InstructToMessages(r, i, o);
    ASSERT_TRUE(m.ok()) << m.status();
    ASSERT_EQ(m->size(), 2u);
    EXPECT_EQ((*m)[0].role, Role::kUser);
    EXPECT_EQ((*m)[0].content, i == 0 ? kWithInput : kNoInput);
    EXPECT_TRUE((*m)[0].masked);
    EXPECT_EQ((*m)[1].role, Role::kAssistant);
    EXPECT_EQ((*m)[1].content, "5");
    EXPECT_FALSE((*m)[1].masked);
  }
  o.train_on_input = true;
  o.new_system_prompt = "Be exact.";
  auto m = InstructToMessages(r, 0, o);
  ASSERT_TRUE(m.ok());
  ASSERT_EQ(m->size(), 3u);
  EXPECT_EQ((*m)[0].role, Role::kSystem);
  EXPECT_TRUE((*m)[0].masked);  // a system prompt is never trained on
  EXPECT_FALSE((*m)[1].masked);
}

TEST(InstructToMessagesTest, InputOutputTemplateAndColumnMap) {
  const JsonRecords r = Records("{\"question\": \"2+2?\", \"answer\": \"4\", \"extra\": 1}\n");
  InstructOptions o;
  o.instruct_template = InstructTemplate::kInputOutput;
  o.column_map = {{"input", "question"}, {"output", "answer"}};
  ASSERT_TRUE(ValidateInstructOptions(o).ok());
  auto m = InstructToMessages(r, 0, o);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)[0].content, "2+2?");
  EXPECT_EQ((*m)[1].content, "4");

  o.column_map = {{"output", "answer"}};
  auto missing = InstructToMessages(r, 0, o);
  EXPECT_EQ(Msg(missing.status()),
            "mem.jsonl:1: no column 'input'; the record has columns answer, extra, question");
  o.column_map = {{"instruction", "question"}};
  EXPECT_THAT(Msg(ValidateInstructOptions(o)),
              HasSubstr("column_map key 'instruction' is not used by this template; expected "
                        "input, output"));
  EXPECT_EQ(*ParseInstructTemplate("alpaca"), InstructTemplate::kAlpaca);
  EXPECT_FALSE(ParseInstructTemplate("dolly").ok());
}

TEST(ChatToMessagesTest, OpenAiMessagesWithTextParts) {
  const JsonRecords r = Records(
      "{\"messages\": [{\"role\": \"system\", \"content\": \"S\"}, {\"role\": \"user\", "
      "\"content\": [{\"type\": \"text\", \"text\": \"a\"}, {\"type\": \"text\", \"text\": "
      "\"b\"}]}, {\"role\": \"assistant\", \"content\": \"c\"}, {\"role\": \"tool\", "
      "\"content\": \"t\"}]}\n");
  ChatOptions o;
  auto m = ChatToMessages(r, 0, o);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->size(), 4u);
  EXPECT_EQ((*m)[0].role, Role::kSystem);
  EXPECT_EQ((*m)[1].content, "ab");
  EXPECT_EQ((*m)[3].role, Role::kIpython);
  EXPECT_TRUE((*m)[0].masked && (*m)[1].masked && (*m)[3].masked);
  EXPECT_FALSE((*m)[2].masked);
  o.train_on_input = true;
  o.new_system_prompt = "New";
  m = ChatToMessages(r, 0, o);
  ASSERT_TRUE(m.ok());
  ASSERT_EQ(m->size(), 4u);  // the old system message is replaced
  EXPECT_EQ((*m)[0].content, "New");
  EXPECT_TRUE((*m)[0].masked);
  EXPECT_FALSE((*m)[1].masked);
}

TEST(ChatToMessagesTest, ShareGptRoles) {
  const JsonRecords r = Records(
      "{\"conversations\": [{\"from\": \"system\", \"value\": \"S\"}, {\"from\": \"human\", "
      "\"value\": \"q\"}, {\"from\": \"gpt\", \"value\": \"a\"}]}\n");
  ChatOptions o;
  o.style = ConversationStyle::kShareGPT;
  auto m = ChatToMessages(r, 0, o);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->size(), 3u);
  EXPECT_EQ((*m)[1].role, Role::kUser);
  EXPECT_EQ((*m)[2].role, Role::kAssistant);
  EXPECT_EQ((*m)[2].content, "a");
}

TEST(ChatToMessagesTest, ErrorsNameLineMessageAndKey) {
  const JsonRecords r = Records(
      "{\"messages\": []}\n"
      "{\"messages\": [{\"role\": \"robot\", \"content\": \"x\"}]}\n"
      "{\"messages\": [{\"content\": \"x\"}]}\n"
      "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image\"}]}]}\n"
      "{\"msgs\": []}\n"
      "{\"messages\": [{\"role\": \"user\", \"content\": 3}]}\n");
  ChatOptions o;
  EXPECT_THAT(Msg(ChatToMessages(r, 0, o).status()),
              HasSubstr("mem.jsonl:1: column 'messages' must be a non-empty list"));
  EXPECT_THAT(Msg(ChatToMessages(r, 1, o).status()),
              HasSubstr("mem.jsonl:2: message 0 of 'messages': unknown message role 'robot'"));
  EXPECT_THAT(Msg(ChatToMessages(r, 2, o).status()),
              HasSubstr("mem.jsonl:3: message 0 of 'messages' has no 'role' (it has content)"));
  EXPECT_THAT(Msg(ChatToMessages(r, 3, o).status()), HasSubstr("only text parts"));
  EXPECT_THAT(Msg(ChatToMessages(r, 4, o).status()),
              HasSubstr("mem.jsonl:5: no column 'messages'; the record has columns msgs"));
  EXPECT_THAT(Msg(ChatToMessages(r, 5, o).status()), HasSubstr("'content' is a JSON number"));
  o.style = ConversationStyle::kShareGPT;
  const JsonRecords s = Records("{\"conversations\": [{\"from\": \"bot\", \"value\": \"x\"}]}");
  EXPECT_THAT(Msg(ChatToMessages(s, 0, o).status()), HasSubstr("unknown 'from' value 'bot'"));
}

}  // namespace
}  // namespace cctune
