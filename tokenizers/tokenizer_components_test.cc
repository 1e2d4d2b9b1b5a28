#include "tokenizers/tokenizer_components.h"

#include "config/config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/llama2c_fixture.h"
#include "tests/util/shared_dir.h"

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
