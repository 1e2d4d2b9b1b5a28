#include "tokenizers/sentencepiece_model.h"

#include <cstring>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tokenizers/test_vectors.h"

namespace cctune {
namespace {

using ::testing::HasSubstr;
using Type = SentencePieceModel::PieceType;

// A tiny protobuf writer for hand-made (and hand-broken) ModelProtos.
std::string Varint(uint64_t v) {
  std::string out;
  while (v >= 0x80) {
    out.push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
  return out;
}
std::string Tag(int field, int wire_type) { return Varint(uint64_t(field) << 3 | wire_type); }
std::string Len(int field, const std::string& bytes) {
  return Tag(field, 2) + Varint(bytes.size()) + bytes;
}
std::string VarintField(int field, int64_t v) {
  return Tag(field, 0) + Varint(static_cast<uint64_t>(v));
}
std::string FloatField(int field, float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  std::string out = Tag(field, 5);
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(bits >> (8 * i)));
  return out;
}
std::string Piece(const std::string& piece, float score, int type) {
  return Len(1, Len(1, piece) + FloatField(2, score) + VarintField(3, type));
}
std::string MinimalModel() {
  return Piece("<unk>", 0, 2) + Piece("<s>", 0, 3) + Piece("</s>", 0, 3) +
         Piece("\xE2\x96\x81" "a", -1, 1) + Len(2, VarintField(3, 2)) +
         Len(3, Len(1, "identity") + VarintField(4, 0));
}

absl::Status Parse(const std::string& bytes) {
  return ParseSentencePieceModel(bytes, "/m/bad.model").status();
}

void ExpectInvalid(const std::string& bytes, const std::string& what) {
  const absl::Status s = Parse(bytes);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("/m/bad.model"));
  EXPECT_THAT(std::string(s.message()), HasSubstr(what));
}

TEST(SentencePieceModelTest, ParsesAHandWrittenModel) {
  auto m = ParseSentencePieceModel(MinimalModel(), "min.model");
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->pieces.size(), 4u);
  EXPECT_EQ(m->pieces[0].type, Type::kUnknown);
  EXPECT_EQ(m->pieces[3].piece, "\xE2\x96\x81" "a");
  EXPECT_FLOAT_EQ(m->pieces[3].score, -1.0f);
  EXPECT_EQ(m->model_type, SentencePieceModel::ModelType::kBpe);
  EXPECT_EQ(m->normalizer_name, "identity");
  EXPECT_FALSE(m->remove_extra_whitespaces);
  EXPECT_TRUE(m->add_dummy_prefix);  // the .proto's default
  EXPECT_FALSE(m->byte_fallback);
  EXPECT_EQ(m->bos_piece, "<s>");
}

TEST(SentencePieceModelTest, ParsesTheCommittedFixtures) {
  auto path = cctune::testing::TokenizerFixturePath("sp_bpe.model");
  ASSERT_TRUE(path.ok()) << path.status();
  auto bpe = ReadSentencePieceModel(*path);
  ASSERT_TRUE(bpe.ok()) << bpe.status();
  EXPECT_EQ(bpe->pieces.size(), 400u);
  EXPECT_EQ(bpe->model_type, SentencePieceModel::ModelType::kBpe);
  EXPECT_TRUE(bpe->byte_fallback);
  EXPECT_EQ(bpe->pieces[3].piece, "<pad>");
  EXPECT_EQ(bpe->pieces[4].type, Type::kUserDefined);
  EXPECT_EQ(bpe->pieces[5].piece, "<0x00>");
  EXPECT_EQ(bpe->pieces[5].type, Type::kByte);
  auto uni = ReadSentencePieceModel(*cctune::testing::TokenizerFixturePath("sp_unigram.model"));
  ASSERT_TRUE(uni.ok()) << uni.status();
  EXPECT_EQ(uni->model_type, SentencePieceModel::ModelType::kUnigram);
  EXPECT_TRUE(uni->remove_extra_whitespaces);
  EXPECT_EQ(uni->pieces[3].type, Type::kControl);
}

TEST(SentencePieceModelTest, EveryTruncationIsACleanError) {
  auto path = cctune::testing::TokenizerFixturePath("sp_unigram.model");
  ASSERT_TRUE(path.ok());
  auto bytes = cctune::testing::ReadTestFile(*path);
  ASSERT_TRUE(bytes.ok());
  int errors = 0;
  for (size_t n = 0; n < bytes->size(); ++n) {
    const absl::Status s = ParseSentencePieceModel(bytes->substr(0, n), "cut.model").status();
    if (!s.ok()) {
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
      EXPECT_THAT(std::string(s.message()), HasSubstr("cut.model"));
      ++errors;
    }
  }
  // A cut between two fields still parses (protobuf has no length prefix); most do not.
  EXPECT_GT(errors, static_cast<int>(bytes->size()) * 9 / 10);
}

TEST(SentencePieceModelTest, WireFormatErrorsSayWhatIsWrong) {
  ExpectInvalid(MinimalModel() + "\x0A\xFF", "truncated varint");
  ExpectInvalid(MinimalModel() + std::string(11, '\xFF'), "varint longer than 10 bytes");
  ExpectInvalid(MinimalModel() + Tag(1, 2) + Varint(50) + "abc", "has length 50");
  ExpectInvalid(MinimalModel() + Tag(7, 3), "unsupported wire type 3");
  ExpectInvalid(MinimalModel() + std::string("\x00\x01", 2), "field number 0");
  ExpectInvalid(MinimalModel() + Tag(9, 5) + "ab", "is truncated");
  ExpectInvalid(MinimalModel() + VarintField(1, 5), "expected a message");
  // Inside a message: the offset is the file's.
  ExpectInvalid(MinimalModel() + Len(1, Len(1, "x") + VarintField(2, 1)), "wire type 0");
}

TEST(SentencePieceModelTest, FieldValuesOutOfRange) {
  ExpectInvalid(MinimalModel() + Piece("b", 0, 9), "type 9 is out of range [1, 6]");
  ExpectInvalid(MinimalModel() + Piece("b", 0, -1), "out of range");
  ExpectInvalid(MinimalModel() + Len(2, VarintField(3, 7)), "model_type 7 is out of range");
  ExpectInvalid(MinimalModel() + Len(2, VarintField(41, 4)),
                "trainer_spec.bos_id 4 is neither -1 nor a piece id (the model has 4 pieces)");
  ExpectInvalid(MinimalModel() + Len(2, VarintField(43, -2)), "trainer_spec.pad_id -2");
  ExpectInvalid(MinimalModel() + Len(2, VarintField(40, int64_t{1} << 40)),
                "unk_id 1099511627776 is out of the int32 range");
  EXPECT_TRUE(Parse(MinimalModel() + Len(2, VarintField(43, -1))).ok());
}

TEST(SentencePieceModelTest, PieceTableErrors) {
  ExpectInvalid(MinimalModel() + Piece("\xE2\x96\x81" "a", -2, 1), "duplicate piece");
  ExpectInvalid(MinimalModel() + Piece("", -2, 1), "piece 4 is empty");
  ExpectInvalid(MinimalModel() + Piece("<unk2>", 0, 2), "both UNKNOWN");
  ExpectInvalid(Piece("<s>", 0, 3) + Piece("a", 0, 1), "no piece has type UNKNOWN");
  ExpectInvalid(MinimalModel() + Piece("<0x41>", 0, 6), "byte_fallback is false");
  ExpectInvalid(MinimalModel() + Len(2, VarintField(35, 1)) + Piece("<0x41>", 0, 6),
                "byte piece <0x00> is missing");
  ExpectInvalid(MinimalModel() + Len(2, VarintField(35, 1)) + Piece("<0xZZ>", 0, 6),
                "expected <0x00>..<0xFF>");
  ExpectInvalid("", "no pieces");
  // The same string may be both a normal and a reserved piece, as in SentencePiece.
  EXPECT_TRUE(Parse(MinimalModel() + Piece("<s>", -3, 1)).ok());
}

TEST(SentencePieceModelTest, ByteValue) {
  EXPECT_EQ(SentencePieceByteValue("<0x00>"), 0);
  EXPECT_EQ(SentencePieceByteValue("<0xFF>"), 255);
  EXPECT_EQ(SentencePieceByteValue("<0x0A>"), 10);
  EXPECT_EQ(SentencePieceByteValue("<0x0a>"), -1);  // SentencePiece writes upper case only
  EXPECT_EQ(SentencePieceByteValue("<0x0A"), -1);
  EXPECT_EQ(SentencePieceByteValue("a"), -1);
}

}  // namespace
}  // namespace cctune
