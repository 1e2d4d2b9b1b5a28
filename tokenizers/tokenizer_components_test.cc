#include "tokenizers/tokenizer_components.h"

#include "config/config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/llama2c_fixture.h"
#include "tests/util/shared_dir.h"
#include "tokenizers/test_vectors.h"

namespace cctune {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<TokenizerComponent> Make(const std::string& yaml) {
  CCTUNE_CHECK_OK(RegisterTokenizers());
  absl::StatusOr<Config> cfg = Config::FromString(yaml, "tok.yaml");
  CCTUNE_CHECK_OK(cfg);
  return TokenizerRegistry().InstantiateKey(cfg->root(), "tokenizer");
}

class Llama2cTokenizerComponentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::TestTempDir("tok_component");
    ASSERT_TRUE(testing::WriteLlama2cFixture(dir_).ok());
    head_ =
        "tokenizer:\n  _component_: torchtune.models.llama2c.llama2c_tokenizer\n  path: " + dir_ +
        "/tok.bin\n";
  }
  std::string dir_, head_;
};

TEST_F(Llama2cTokenizerComponentTest, Defaults) {
  auto t = Make(head_);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->prompt_format, PromptFormat::kNone);
  EXPECT_FALSE(t->max_seq_len.has_value());
  EXPECT_EQ(t->tokenizer->vocab_size(), 300);
  std::vector<int32_t> ids = t->tokenizer->Encode("the cat", true, false);
  EXPECT_EQ(ValueOrDie(t->DecodeForPrint(ids)), "the cat");
}

TEST_F(Llama2cTokenizerComponentTest, TemplatesAndLimits) {
  auto t = Make(head_ +
                "  prompt_template: torchtune.models.llama2.Llama2ChatTemplate\n"
                "  max_seq_len: 32\n  vocab_size: 300\n");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->prompt_format, PromptFormat::kLlama2Chat);
  EXPECT_EQ(t->max_seq_len, 32);

  auto bad = Make(head_ + "  prompt_template: llama3_chat\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("does not apply"));
  bad = Make(head_ + "  prompt_template: my.Template\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("'my.Template' is not supported"));
  bad = Make(head_ + "  max_seq_len: 0\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("key 'tokenizer.max_seq_len': must be in [1, 1048576], got 0"));
  bad = Make(head_ + "  vocab_size: 512\n");
  ASSERT_FALSE(bad.ok());
  bad = Make(
      "tokenizer:\n  _component_: cctune.models.llama2c.llama2c_tokenizer\n"
      "  path: /no/tok.bin\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("tok.yaml:3: key 'tokenizer.path': tokenizer file '/no/tok.bin' does "
                        "not exist"));
}

// torchtune prints Llama 3 output with decode(skip_special_tokens=True): the header tokens
// vanish and the role names stay.
TEST(Llama3TokenizerComponentTest, DecodeForPrintSkipsSpecialTokens) {
  auto path = testing::SharedFile("tokenizers/llama3/tokenizer.model");
  if (!path.ok()) GTEST_SKIP() << path.status();
  auto t =
      Make("tokenizer:\n  _component_: torchtune.models.llama3.llama3_tokenizer\n  path: " + *path +
           "\n  max_seq_len: null\n  prompt_template: null\n");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->prompt_format, PromptFormat::kLlama3Chat);
  Message user;
  user.role = Role::kUser;
  user.content = "Tell me a joke.";
  std::vector<int32_t> ids = ValueOrDie(InferencePrompt(*t->tokenizer, t->prompt_format, {user}));
  EXPECT_EQ(ids.front(), 128000);
  EXPECT_EQ(ValueOrDie(t->DecodeForPrint(ids)), "user\n\nTell me a joke.assistant\n\n");
}

TEST(Llama2TokenizerComponentTest, SentencePiece) {
  auto path = testing::SharedFile("tokenizers/llama2/tokenizer.model");
  if (!path.ok()) GTEST_SKIP() << path.status();
  auto t =
      Make("tokenizer:\n  _component_: torchtune.models.llama2.llama2_tokenizer\n  path: " + *path +
           "\n");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->prompt_format, PromptFormat::kNone);
  EXPECT_EQ(t->tokenizer->vocab_size(), 32000);
  std::vector<int32_t> ids = t->tokenizer->Encode("Hello world", true, false);
  EXPECT_EQ(ValueOrDie(t->DecodeForPrint(ids)), "Hello world");
}

std::string Fixture(const std::string& name) { return ValueOrDie(testing::TokenizerFixturePath(name)); }

TEST(MistralTokenizerComponentTest, DefaultsToMistralChatTemplate) {
  const std::string head = "tokenizer:\n  _component_: torchtune.models.mistral.mistral_tokenizer\n"
                           "  path: " + Fixture("sp_bpe.model") + "\n";
  auto t = Make(head + "  max_seq_len: 64\n");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->prompt_format, PromptFormat::kMistralChat);
  EXPECT_EQ(t->max_seq_len, 64);
  EXPECT_EQ(t->tokenizer->pad_id(), 3);  // sp_bpe.model's own pad; Mistral's has none: 0
  EXPECT_THAT(t->tokenizer->stop_tokens(), ::testing::ElementsAre(t->tokenizer->eos_id()));
  Message user;
  user.content = "hello";
  auto prompt = InferencePrompt(*t->tokenizer, t->prompt_format, {user});
  ASSERT_TRUE(prompt.ok());
  EXPECT_EQ(ValueOrDie(t->DecodeForPrint(*prompt)), "[INST] hello [/INST]");
  t = Make(head + "  prompt_template: null\n");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->prompt_format, PromptFormat::kNone);
  t = Make(head + "  prompt_template: llama3_chat\n");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("does not apply"));
}

TEST(Qwen2_5TokenizerComponentTest, EveryKeyTakesEffectOrIsRefused) {
  const std::string head = "tokenizer:\n  _component_: torchtune.models.qwen2_5.qwen2_5_tokenizer\n"
                           "  path: " + Fixture("qwen_bpe_vocab.json") + "\n  merges_file: " +
                           Fixture("qwen_bpe_merges.txt") + "\n";
  auto t = Make(head + "  max_seq_len: 32\n");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->prompt_format, PromptFormat::kQwen2_5Chat);
  EXPECT_EQ(t->tokenizer->eos_id(), 151645);
  EXPECT_EQ(t->tokenizer->pad_id(), 151643);
  EXPECT_EQ(t->tokenizer->bos_id(), -1);
  EXPECT_EQ(t->first_special_id, 151643);
  Message user;
  user.content = "hi";
  auto prompt = InferencePrompt(*t->tokenizer, t->prompt_format, {user});
  ASSERT_TRUE(prompt.ok());
  EXPECT_EQ(ValueOrDie(t->DecodeForPrint(*prompt)), "user\nhi\nassistant\n");
  EXPECT_EQ(ValueOrDie(t->tokenizer->Decode(*prompt)),
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");

  t = Make(head + "  special_tokens_path: " + Fixture("qwen_bpe_tokenizer.json") +
           "\n  eos_token: <|endoftext|>\n  bos_token: <|im_start|>\n  bpe_cache_size: 0\n");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->tokenizer->vocab_size(), 1022);
  EXPECT_EQ(t->tokenizer->eos_id(), 1000);
  EXPECT_EQ(t->tokenizer->bos_id(), 1001);
  EXPECT_THAT(t->tokenizer->stop_tokens(), ::testing::ElementsAre(1000, 1002));

  EXPECT_FALSE(t->truncate_left);
  auto left = Make(head + "  truncation_type: left\n");
  ASSERT_TRUE(left.ok()) << left.status();
  EXPECT_TRUE(left->truncate_left);
  auto bad = Make(head + "  truncation_type: middle\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("truncation_type"));
  bad = Make(head + "  prompt_template: torchtune.data.ChatMLTemplate\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("already lays messages out"));
  bad = Make(head + "  unk_token: <unk>\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("unk_token '<unk>'"));
  bad = Make(head + "  eos_token: <|nope|>\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("<|nope|>"));
  bad = Make(head + "  errors: strict\n");
  ASSERT_FALSE(bad.ok());
  bad = Make(head + "  special_tokens_path: /no/tokenizer.json\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("/no/tokenizer.json"));
  bad = Make("tokenizer:\n  _component_: torchtune.models.qwen2_5.qwen2_5_tokenizer\n  path: " +
             Fixture("qwen_bpe_vocab.json") + "\n");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("merges_file"));
}

TEST(TokenizerComponentsTest, ByteTokenizerNeedsNoFile) {
  absl::StatusOr<TokenizerComponent> t =
      Make("tokenizer:\n  _component_: cctune.data.byte_tokenizer\n  max_seq_len: 7\n");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->tokenizer->vocab_size(), 264);
  EXPECT_EQ(t->max_seq_len, 7);
  EXPECT_EQ(t->tokenizer->Decode(t->tokenizer->Encode("a+b", false, false)).value(), "a+b");
}

}  // namespace
}  // namespace cctune
