// Test-only loaders for tokenizer parity data: the JSON fixtures written by
// tools/golden/gen_tokenizer_vectors.py (tests/assets/tokenizers/) and llama.cpp's
// vectors.inp / vectors.out pairs in ../shared/tokenizers/<name>/.
#ifndef CCTUNE_TOKENIZERS_TEST_VECTORS_H_
#define CCTUNE_TOKENIZERS_TEST_VECTORS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace cctune {
namespace testing {

struct EncodeCase {
  std::string text;
  std::vector<int32_t> ids;
  bool parse_special = false;
  // SentencePiece fixtures: the model's normaliser changed the text (so decoding does not
  // give it back, and llama2.c's run.c, which does not normalise, may differ).
  bool normalized = false;
};

struct DecodeCase {
  std::vector<int32_t> ids;
  std::string text;
};

struct TokenizerFixture {
  std::vector<EncodeCase> cases;
  std::vector<DecodeCase> decode_cases;
};

// A conversation and the ids and per-token masks the reference gives it
// (tools/golden/gen_qwen_mistral_fixtures.py's "chat_cases").
struct ChatMessage {
  std::string role;
  std::string content;
  bool masked = false;
  bool ipython = false;
};

struct ChatCase {
  std::vector<ChatMessage> messages;
  int64_t max_seq_len = 0;  // 0: none
  bool add_end_tokens = true;
  bool truncate_left = false;
  std::vector<int32_t> ids;
  std::vector<uint8_t> mask;
};

// tests/assets/tokenizers/<file_name>'s "chat_cases", or, when `model` is not empty, its
// "models"[model] list. NotFound when that model has no entry.
absl::StatusOr<std::vector<ChatCase>> LoadChatCases(const std::string& file_name,
                                                    const std::string& model = "");

// The path of tests/assets/tokenizers/<file_name> (runfiles first, then the source tree).
absl::StatusOr<std::string> TokenizerFixturePath(const std::string& file_name);

// tests/assets/tokenizers/<file_name>, from the runfiles or the source tree.
absl::StatusOr<TokenizerFixture> LoadTokenizerFixture(const std::string& file_name);

// ../shared/<dir>/vectors.{inp,out}: input i is piece i of vectors.inp split on
// "\n__ggml_vocab_test__\n"; line i of vectors.out holds its ids. NotFound when absent.
absl::StatusOr<std::vector<EncodeCase>> LoadSharedVocabVectors(const std::string& dir);

// A file's bytes (for tests).
absl::StatusOr<std::string> ReadTestFile(const std::string& path);

}  // namespace testing
}  // namespace cctune

#endif  // CCTUNE_TOKENIZERS_TEST_VECTORS_H_
