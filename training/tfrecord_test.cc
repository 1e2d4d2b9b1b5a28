#include "training/tfrecord.h"

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "training/crc32c.h"

namespace cctune {
namespace {

using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return absl::StrCat(tmp ? tmp : "/tmp", "/tfrecord_test_", name);
}

std::string RandomBytes(Generator& gen, size_t n) {
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(gen.NextUint32());
  return s;
}

uint64_t Le64At(const std::string& s, size_t pos) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(s[pos + i]);
  return v;
}
uint32_t Le32At(const std::string& s, size_t pos) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(s[pos + i]);
  return v;
}

TEST(TFRecordTest, FrameLayoutFollowsTheFormat) {
  const std::string data = "hello tfrecord";
  const std::string framed = FrameTFRecord(data);
  ASSERT_EQ(framed.size(), 8 + 4 + data.size() + 4);
  EXPECT_EQ(Le64At(framed, 0), data.size());
  // Independent check of each CRC with the bitwise definition in crc32c_test: here, against
  // the documented masking formula applied to Crc32c.
  const uint32_t len_crc = Crc32c(framed.data(), 8);
  EXPECT_EQ(Le32At(framed, 8), ((len_crc >> 15) | (len_crc << 17)) + 0xa282ead8u);
  EXPECT_EQ(framed.substr(12, data.size()), data);
  const uint32_t data_crc = Crc32c(data);
  EXPECT_EQ(Le32At(framed, 12 + data.size()), ((data_crc >> 15) | (data_crc << 17)) + 0xa282ead8u);
}

TEST(TFRecordTest, WriteThenReadRoundTripsRandomRecords) {
  Generator gen(5);
  std::vector<std::string> records;
  for (size_t n : {0, 1, 7, 8, 13, 100, 4099}) records.push_back(RandomBytes(gen, n));
  const std::string path = TempPath("roundtrip");
  {
    auto writer = TFRecordWriter::Open(path);
    ASSERT_TRUE(writer.ok()) << writer.status();
    for (const std::string& r : records) ASSERT_TRUE((*writer)->Write(r).ok());
    ASSERT_TRUE((*writer)->Close().ok());
    EXPECT_FALSE((*writer)->Write("late").ok());
  }
  auto read = ReadTFRecordFile(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, records);

  // Appending continues the file.
  {
    auto writer = TFRecordWriter::Open(path, /*append=*/true);
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE((*writer)->Write("more").ok());
  }
  read = ReadTFRecordFile(path);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size(), records.size() + 1);
  EXPECT_EQ(read->back(), "more");
}

TEST(TFRecordTest, CorruptionIsDetectedAndLocated) {
  const std::string a = FrameTFRecord("first record");
  const std::string b = FrameTFRecord("second record");
  const std::string image = a + b;
  ASSERT_TRUE(ParseTFRecords(image, "f").ok());

  // A flipped data byte in the second record.
  std::string bad = image;
  bad[a.size() + 12 + 3] ^= 0x10;
  auto r = ParseTFRecords(bad, "events.bin");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("events.bin: record 1 at byte offset 28"));
  EXPECT_THAT(r.status().message(), HasSubstr("data CRC mismatch"));

  // A flipped length byte in the first record.
  bad = image;
  bad[0] ^= 0x01;
  r = ParseTFRecords(bad, "events.bin");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("record 0"));
  EXPECT_THAT(r.status().message(), HasSubstr("length CRC mismatch"));

  // Truncations anywhere inside the second record.
  for (size_t cut = a.size() + 1; cut < image.size(); ++cut) {
    r = ParseTFRecords(image.substr(0, cut), "events.bin");
    ASSERT_FALSE(r.ok()) << cut;
    EXPECT_THAT(r.status().message(), HasSubstr("record 1"));
  }
  EXPECT_FALSE(ReadTFRecordFile(TempPath("does_not_exist")).ok());
}

}  // namespace
}  // namespace cctune
