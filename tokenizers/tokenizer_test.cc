#include "tokenizers/tokenizer.h"

#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cctune {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Ids are the bytes; records the options it was called with.
class ByteTokenizer final : public Tokenizer {
 public:
  void EncodeAppend(std::string_view text, const EncodeOptions& options,
                    std::vector<int32_t>* ids) const override {
    last_options_ = options;
    if (options.add_bos) ids->push_back(256);
    for (char c : text) ids->push_back(static_cast<uint8_t>(c));
    if (options.add_eos) ids->push_back(257);
  }
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids) const override {
    std::string s;
    for (int32_t id : ids) s += static_cast<char>(id);
    return s;
  }
  absl::StatusOr<std::string> DecodePiece(int32_t id, int32_t prev_id) const override {
    return std::string(1, static_cast<char>(id));
  }
  int32_t bos_id() const override { return 256; }
  int32_t eos_id() const override { return 257; }
  int32_t pad_id() const override { return 0; }
  int32_t vocab_size() const override { return 258; }
  absl::Span<const int32_t> stop_tokens() const override { return stop_; }

  mutable EncodeOptions last_options_;
  std::vector<int32_t> stop_ = {257};
};

TEST(TokenizerTest, EncodeWrappersPassOptionsThrough) {
  ByteTokenizer tok;
  EXPECT_THAT(tok.Encode("ab", true, false), ElementsAre(256, 'a', 'b'));
  EXPECT_FALSE(tok.last_options_.parse_special);
  EncodeOptions o;
  o.add_eos = true;
  o.parse_special = true;
  EXPECT_THAT(tok.Encode("c", o), ElementsAre('c', 257));
  EXPECT_TRUE(tok.last_options_.parse_special);
  EXPECT_EQ(tok.SpecialTokenId("<|eot_id|>"), std::nullopt);
}

TEST(TokenizerTest, CheckTokenIdNamesTheIdAndRange) {
  EXPECT_TRUE(CheckTokenId(0, 10, "x").ok());
  EXPECT_TRUE(CheckTokenId(9, 10, "x").ok());
  const absl::Status s = CheckTokenId(10, 10, "MyDecode");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("MyDecode: token id 10"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("[0, 10)"));
  EXPECT_FALSE(CheckTokenId(-3, 10, "x").ok());
}

TEST(TokenizerTest, ReadTokenizerFile) {
  const std::string path = ::testing::TempDir() + "/tok_bytes.bin";
  std::string bytes(100000, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 7 + 3);
  {
    std::ofstream out(path, std::ios::binary);
    out << bytes;
  }
  auto read = ReadTokenizerFile(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(*read == bytes);
  auto missing = ReadTokenizerFile("/nonexistent/dir/tokenizer.model");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()),
              HasSubstr("/nonexistent/dir/tokenizer.model"));
}

}  // namespace
}  // namespace cctune
