#include "data/sft_dataset.h"

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/shared_dir.h"
#include "tokenizers/byte_tokenizer.h"
#include "tokenizers/llama2c.h"

namespace cctune {
namespace {

using ::testing::HasSubstr;

std::string Msg(const absl::Status& s) { return std::string(s.message()); }

std::vector<int32_t> Bytes(const std::string& s) {
  return std::vector<int32_t>(reinterpret_cast<const uint8_t*>(s.data()),
                              reinterpret_cast<const uint8_t*>(s.data()) + s.size());
}

const std::string kAlpacaWithInput =
    "Below is an instruction that describes a task, paired with an input that provides further "
    "context. Write a response that appropriately completes the request.\n\n### Instruction:\n";

// Format "none" with the byte tokenizer: BOS, the prompt's bytes, the answer's bytes, EOS;
// labels are -100 over BOS and the prompt.
TEST(InstructDatasetTest, AlpacaTokensAndLabelsWithByteTokenizer) {
  ByteTokenizer tok;
  InstructDatasetOptions o;
  o.source = "data/testdata/alpaca.jsonl";
  auto ds = LoadInstructDataset(tok, PromptFormat::kNone, o);
  ASSERT_TRUE(ds.ok()) << ds.status();
  ASSERT_EQ(ds->size(), 4);
  EXPECT_FALSE(ds->packed());

  const std::string prompt =
      kAlpacaWithInput + "Add the numbers.\n\n### Input:\n2 + 3\n\n### Response:\n";
  std::vector<int32_t> want_tokens = {ByteTokenizer::kBos};
  for (int32_t b : Bytes(prompt)) want_tokens.push_back(b);
  want_tokens.push_back('5');
  want_tokens.push_back(ByteTokenizer::kEos);
  std::vector<int32_t> want_labels(1 + prompt.size(), kIgnoreIndex);
  want_labels.push_back('5');
  want_labels.push_back(ByteTokenizer::kEos);
  EXPECT_EQ((*ds)[0].tokens, want_tokens);
  EXPECT_EQ((*ds)[0].labels, want_labels);
  EXPECT_TRUE((*ds)[0].input_pos.empty());
  // "desserts" + EOS are the only trained tokens of record 3.
  EXPECT_EQ(ds->NumLabelTokens(), 2 + 4 + 9 + 4);
}

TEST(InstructDatasetTest, TrainOnInputAndTruncation) {
  ByteTokenizer tok;
  InstructDatasetOptions o;
  o.source = "data/testdata/alpaca.jsonl";
  o.messages.train_on_input = true;
  auto ds = LoadInstructDataset(tok, PromptFormat::kNone, o);
  ASSERT_TRUE(ds.ok()) << ds.status();
  for (const Sample& s : ds->samples()) EXPECT_EQ(s.labels, s.tokens);

  o.messages.train_on_input = false;
  o.max_seq_len = 40;
  ds = LoadInstructDataset(tok, PromptFormat::kNone, o);
  ASSERT_TRUE(ds.ok()) << ds.status();
  for (const Sample& s : ds->samples()) {
    ASSERT_EQ(s.tokens.size(), 40u);
    EXPECT_EQ(s.tokens.back(), ByteTokenizer::kEos);  // the template's truncation
    EXPECT_EQ(s.labels[20], kIgnoreIndex);            // still inside the prompt
  }
}

TEST(InstructDatasetTest, ColumnMapOnAJsonArray) {
  ByteTokenizer tok;
  InstructDatasetOptions o;
  o.source = "data/testdata/alpaca_renamed.json";
  auto missing = LoadInstructDataset(tok, PromptFormat::kNone, o);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(Msg(missing.status()),
            "data/testdata/alpaca_renamed.json:2: no column 'instruction'; the record has "
            "columns context, prompt, response");
  o.messages.column_map = {{"instruction", "prompt"}, {"input", "context"}, {"output", "response"}};
  auto ds = LoadInstructDataset(tok, PromptFormat::kNone, o);
  ASSERT_TRUE(ds.ok()) << ds.status();
  ASSERT_EQ(ds->size(), 3);
  const Sample& s = (*ds)[2];
  // The answer "42" then EOS are the only labels.
  std::vector<int32_t> labelled;
  for (int32_t l : s.labels) {
    if (l != kIgnoreIndex) labelled.push_back(l);
  }
  EXPECT_EQ(labelled, (std::vector<int32_t>{'4', '2', ByteTokenizer::kEos}));
  o.messages.column_map["answer"] = "x";
  EXPECT_THAT(Msg(LoadInstructDataset(tok, PromptFormat::kNone, o).status()),
              HasSubstr("column_map key 'answer'"));
}

TEST(InstructDatasetTest, FileErrorsNameFileLineAndColumn) {
  ByteTokenizer tok;
  InstructDatasetOptions o;
  o.source = "data/testdata/malformed.jsonl";
  EXPECT_THAT(Msg(LoadInstructDataset(tok, PromptFormat::kNone, o).status()),
              HasSubstr("data/testdata/malformed.jsonl:3: malformed JSON"));
  o.source = "data/testdata/missing_column.jsonl";
  EXPECT_EQ(Msg(LoadInstructDataset(tok, PromptFormat::kNone, o).status()),
            "data/testdata/missing_column.jsonl:2: no column 'output'; the record has columns "
            "answer, input, instruction");
  o.source = "data/testdata/absent.jsonl";
  EXPECT_EQ(LoadInstructDataset(tok, PromptFormat::kNone, o).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(ChatDatasetTest, OpenAiMultiTurnMasksEveryUserTurn) {
  ByteTokenizer tok;
  ChatDatasetOptions o;
  o.source = "data/testdata/chat_openai.jsonl";
  auto ds = LoadChatDataset(tok, PromptFormat::kNone, o);
  ASSERT_TRUE(ds.ok()) << ds.status();
  ASSERT_EQ(ds->size(), 2);
  // Record 2: BOS "Hello, there" "Hi." EOS BOS "Bye" "Bye!" EOS.
  const int32_t B = ByteTokenizer::kBos, E = ByteTokenizer::kEos, X = kIgnoreIndex;
  std::vector<int32_t> want = {B};
  for (int32_t b : Bytes("Hello, thereHi.")) want.push_back(b);
  want.push_back(E);
  want.push_back(B);
  for (int32_t b : Bytes("ByeBye!")) want.push_back(b);
  want.push_back(E);
  EXPECT_EQ((*ds)[1].tokens, want);
  std::vector<int32_t> labels(1 + 12, X);
  for (int32_t b : Bytes("Hi.")) labels.push_back(b);
  labels.push_back(E);
  labels.insert(labels.end(), 1 + 3, X);
  for (int32_t b : Bytes("Bye!")) labels.push_back(b);
  labels.push_back(E);
  EXPECT_EQ((*ds)[1].labels, labels);
}

TEST(ChatDatasetTest, Llama3FormatTrainsOnAnswerAndEot) {
  ByteTokenizer tok;
  ChatDatasetOptions o;
  o.source = "data/testdata/chat_sharegpt.json";
  o.messages.style = ConversationStyle::kShareGPT;
  auto ds = LoadChatDataset(tok, PromptFormat::kLlama3Chat, o);
  ASSERT_TRUE(ds.ok()) << ds.status();
  ASSERT_EQ(ds->size(), 2);
  // The assistant turn "<sh>assistant<eh>\n\nParis<eot>" is trained on; nothing else.
  std::vector<int32_t> labelled;
  for (int32_t l : (*ds)[0].labels) {
    if (l != kIgnoreIndex) labelled.push_back(l);
  }
  std::vector<int32_t> want = {ByteTokenizer::kStartHeader};
  for (int32_t b : Bytes("assistant")) want.push_back(b);
  want.push_back(ByteTokenizer::kEndHeader);
  for (int32_t b : Bytes("\n\nParis")) want.push_back(b);
  want.push_back(ByteTokenizer::kEot);
  EXPECT_EQ(labelled, want);
  EXPECT_EQ((*ds)[0].tokens.front(), ByteTokenizer::kBos);
  EXPECT_EQ((*ds)[0].tokens.back(), ByteTokenizer::kEos);
}

TEST(InstructDatasetTest, Llama2cTokenizerFromSharedMasksThePrompt) {
  auto path = testing::SharedFile("models/stories260K/tok512.bin");
  if (!path.ok()) GTEST_SKIP() << path.status();
  auto tok = Llama2cTokenizer::Load(*path);
  ASSERT_TRUE(tok.ok()) << tok.status();
  InstructDatasetOptions o;
  o.source = "data/testdata/alpaca.jsonl";
  auto ds = LoadInstructDataset(**tok, PromptFormat::kNone, o);
  ASSERT_TRUE(ds.ok()) << ds.status();
  const char* answers[] = {"5", "Red", "desserts", "Hi!"};
  for (int64_t i = 0; i < ds->size(); ++i) {
    const Sample& s = (*ds)[i];
    // A masked prefix, then the answer's tokens and EOS, all labelled.
    size_t first = 0;
    while (first < s.labels.size() && s.labels[first] == kIgnoreIndex) ++first;
    ASSERT_LT(first, s.labels.size());
    for (size_t k = first; k < s.labels.size(); ++k) EXPECT_EQ(s.labels[k], s.tokens[k]);
    EXPECT_EQ(s.tokens.back(), (*tok)->eos_id());
    std::vector<int32_t> answer(s.tokens.begin() + first, s.tokens.end() - 1);
    EXPECT_EQ(*(*tok)->Decode(answer), answers[i]);
  }
}

TEST(ChatDatasetTest, BadMessagesNameTheRecord) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = absl::StrCat(tmp ? tmp : "/tmp", "/bad_chat.jsonl");
  std::ofstream(path) << "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}]}\n"
                      << "{\"messages\": [{\"role\": \"robot\", \"content\": \"a\"}]}\n";
  ByteTokenizer tok;
  ChatDatasetOptions o;
  o.source = path;
  EXPECT_THAT(Msg(LoadChatDataset(tok, PromptFormat::kNone, o).status()),
              HasSubstr("bad_chat.jsonl:2: message 0 of 'messages': unknown message role"));
}

}  // namespace
}  // namespace cctune
