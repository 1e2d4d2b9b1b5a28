// Test fixture: a small random llama2.c model (.bin) and a llama2.c tokenizer (.bin) written
// to a directory, so recipe and CLI tests run without ../shared. The model has far-from-flat
// logits (weights ~ N(0, 1.5^2/fan_in)), so greedy decoding is well defined.
#ifndef CCTUNE_TESTS_LLAMA2C_FIXTURE_H_
#define CCTUNE_TESTS_LLAMA2C_FIXTURE_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace cctune {
namespace testing {

struct Llama2cFixtureSpec {
  int32_t dim = 32;
  int32_t hidden_dim = 64;
  int32_t n_layers = 2;
  int32_t n_heads = 4;
  int32_t n_kv_heads = 2;
  int32_t vocab_size = 300;  // the tokenizer below has exactly 300 tokens
  int32_t seq_len = 64;
  uint64_t seed = 11;
};

// Writes <dir>/model.bin and <dir>/tok.bin (dir must exist).
absl::Status WriteLlama2cFixture(const std::string& dir, const Llama2cFixtureSpec& spec = {});

// A fresh directory under $TEST_TMPDIR (or /tmp) named `name`.
std::string TestTempDir(const std::string& name);

}  // namespace testing
}  // namespace cctune

#endif  // CCTUNE_TESTS_LLAMA2C_FIXTURE_H_
