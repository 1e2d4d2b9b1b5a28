#include "training/metric_logger.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "training/event.pb.h"
#include "training/tfrecord.h"

namespace cctune {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string TestDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp ? tmp : "/tmp", "/metric_logger_test_", name);
  fs::remove_all(dir);
  return dir;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string ReadFileStream(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string s;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) s.append(buf, n);
  return s;
}

TEST(StdoutLoggerTest, PrintsStepAndMetricsInOrder) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  StdoutLogger logger(f);
  ASSERT_TRUE(logger.LogDict({{"loss", 2.3104567}, {"lr", 3e-4}}, 12).ok());
  ASSERT_TRUE(logger.Log("grad_norm", 0.5, 13).ok());
  EXPECT_EQ(ReadFileStream(f), "Step 12 | loss:2.31046 lr:0.0003\nStep 13 | grad_norm:0.5\n");
  std::fclose(f);
}

TEST(JsonlLoggerTest, OneObjectPerLineAppendedAcrossLoggers) {
  const std::string dir = TestDir("jsonl") + "/nested/logs";
  Generator gen(1);
  std::vector<double> values;
  for (int i = 0; i < 6; ++i) values.push_back(gen.Normal() * std::pow(10.0, i - 3));
  {
    auto logger = JsonlLogger::Create(dir);
    ASSERT_TRUE(logger.ok()) << logger.status();
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE((*logger)->LogDict({{"loss", values[i]}, {"lr", values[i + 3]}}, i).ok());
      // Flushed at every write: the file already holds i + 1 lines.
      const std::string text = ReadAll((*logger)->path());
      EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), i + 1);
    }
  }
  {
    auto logger = JsonlLogger::Create(dir);  // a resumed run appends
    ASSERT_TRUE(logger.ok());
    ASSERT_TRUE((*logger)->LogDict({{"loss", NAN}, {"tokens_per_second", 1234.5}}, 3).ok());
    ASSERT_TRUE((*logger)->Close().ok());
    EXPECT_FALSE((*logger)->Log("loss", 1.0, 4).ok());
  }
  const std::string text = ReadAll(dir + "/metrics.jsonl");
  std::vector<std::string> lines = absl::StrSplit(text, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 4u);
  for (int i = 0; i < 3; ++i) {
    const nlohmann::json j = nlohmann::json::parse(lines[i]);
    EXPECT_EQ(j["step"].get<int64_t>(), i);
    EXPECT_EQ(j["loss"].get<double>(), values[i]);  // shortest round-trip printing: exact
    EXPECT_EQ(j["lr"].get<double>(), values[i + 3]);
    EXPECT_EQ(j.size(), 3u);
  }
  EXPECT_EQ(lines[0].substr(0, 10), "{\"step\":0,");  // step first
  const nlohmann::json last = nlohmann::json::parse(lines[3]);
  EXPECT_TRUE(last["loss"].is_null());
  EXPECT_EQ(last["tokens_per_second"].get<double>(), 1234.5);
}

TEST(JsonlLoggerTest, RejectsBadArguments) {
  auto bad = JsonlLogger::Create(TestDir("jsonl_bad"), "a/b.jsonl");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("a/b.jsonl"));
  auto logger = JsonlLogger::Create(TestDir("jsonl_step"));
  ASSERT_TRUE(logger.ok());
  EXPECT_FALSE((*logger)->Log("step", 1.0, 0).ok());
  // A directory that cannot be created (its parent is a file).
  const std::string file = TestDir("jsonl_file");
  std::ofstream(file) << "x";
  auto blocked = JsonlLogger::Create(file + "/logs");
  ASSERT_FALSE(blocked.ok());
  EXPECT_THAT(blocked.status().message(), HasSubstr(file + "/logs"));
}

// A minimal protobuf wire decoder, independent of the generated code: checks that the bytes
// use TensorBoard's field numbers (Event: wall_time=1 fixed64, step=2 varint,
// file_version=3 / summary=5 length-delimited; Summary.value=1; Value: tag=1,
// simple_value=2 fixed32).
struct WireField {
  int number;
  int wire_type;
  uint64_t varint = 0;  // wire type 0, 1 (raw bits) and 5 (raw bits)
  std::string bytes;    // wire type 2
};

bool DecodeWire(const std::string& s, std::vector<WireField>* out) {
  size_t p = 0;
  auto varint = [&](uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p >= s.size()) return false;
      const uint8_t b = static_cast<uint8_t>(s[p++]);
      *v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return true;
    }
    return false;
  };
  while (p < s.size()) {
    uint64_t key;
    if (!varint(&key)) return false;
    WireField f;
    f.number = static_cast<int>(key >> 3);
    f.wire_type = static_cast<int>(key & 7);
    if (f.wire_type == 0) {
      if (!varint(&f.varint)) return false;
    } else if (f.wire_type == 1 || f.wire_type == 5) {
      const size_t n = f.wire_type == 1 ? 8 : 4;
      if (p + n > s.size()) return false;
      for (size_t i = 0; i < n; ++i)
        f.varint |= static_cast<uint64_t>(static_cast<uint8_t>(s[p + i])) << (8 * i);
      p += n;
    } else if (f.wire_type == 2) {
      uint64_t len;
      if (!varint(&len) || p + len > s.size()) return false;
      f.bytes = s.substr(p, len);
      p += len;
    } else {
      return false;
    }
    out->push_back(f);
  }
  return true;
}

TEST(TensorBoardLoggerTest, WritesFileVersionThenScalarEvents) {
  const std::string dir = TestDir("tb");
  TensorBoardLoggerOptions options;
  options.hostname = "testhost";
  options.start_time = 1700000000.25;
  const double before = WallTimeSeconds();
  auto logger = TensorBoardLogger::Create(dir, options);
  ASSERT_TRUE(logger.ok()) << logger.status();
  EXPECT_EQ((*logger)->path(), dir + "/events.out.tfevents.1700000000.testhost");

  Generator gen(9);
  std::vector<Metrics> logged;
  for (int step = 0; step < 5; ++step) {
    Metrics m = {{"loss", gen.Normal() * 3}, {"lr", 1e-4 * step}, {"zero", 0.0}};
    ASSERT_TRUE((*logger)->LogDict(m, step * 10).ok());
    logged.push_back(m);
    // Flushed at every write: the records are readable (and CRC-valid) already.
    auto partial = ReadTFRecordFile((*logger)->path());
    ASSERT_TRUE(partial.ok()) << partial.status();
    EXPECT_EQ(partial->size(), static_cast<size_t>(step + 2));
  }
  ASSERT_TRUE((*logger)->Log("negative", -2.5, 99).ok());
  ASSERT_TRUE((*logger)->Close().ok());
  const double after = WallTimeSeconds();

  auto records = ReadTFRecordFile(dir + "/events.out.tfevents.1700000000.testhost");
  ASSERT_TRUE(records.ok()) << records.status();
  ASSERT_EQ(records->size(), 7u);

  tensorboard::Event first;
  ASSERT_TRUE(first.ParseFromString((*records)[0]));
  EXPECT_EQ(first.file_version(), "brain.Event:2");
  EXPECT_EQ(first.wall_time(), 1700000000.25);

  for (int step = 0; step < 5; ++step) {
    tensorboard::Event e;
    ASSERT_TRUE(e.ParseFromString((*records)[step + 1]));
    EXPECT_EQ(e.step(), step * 10);
    EXPECT_GE(e.wall_time(), before);
    EXPECT_LE(e.wall_time(), after);
    ASSERT_TRUE(e.has_summary());
    ASSERT_EQ(e.summary().value_size(), 3);
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(e.summary().value(i).tag(), logged[step][i].first);
      ASSERT_TRUE(e.summary().value(i).has_simple_value());
      EXPECT_EQ(e.summary().value(i).simple_value(), static_cast<float>(logged[step][i].second));
    }
  }

  // The same bytes decoded by hand with TensorBoard's field numbers.
  std::vector<WireField> fields;
  ASSERT_TRUE(DecodeWire((*records)[0], &fields));
  ASSERT_EQ(fields.size(), 2u);  // step 0 is a proto3 default and is not written
  EXPECT_EQ(fields[0].number, 1);
  EXPECT_EQ(fields[0].wire_type, 1);
  double wall;
  std::memcpy(&wall, &fields[0].varint, 8);
  EXPECT_EQ(wall, 1700000000.25);
  EXPECT_EQ(fields[1].number, 3);
  EXPECT_EQ(fields[1].bytes, "brain.Event:2");

  fields.clear();
  ASSERT_TRUE(DecodeWire((*records)[6], &fields));
  ASSERT_EQ(fields.size(), 3u);
  EXPECT_EQ(fields[1].number, 2);
  EXPECT_EQ(fields[1].wire_type, 0);
  EXPECT_EQ(fields[1].varint, 99u);
  EXPECT_EQ(fields[2].number, 5);
  std::vector<WireField> summary;
  ASSERT_TRUE(DecodeWire(fields[2].bytes, &summary));
  ASSERT_EQ(summary.size(), 1u);
  EXPECT_EQ(summary[0].number, 1);
  std::vector<WireField> value;
  ASSERT_TRUE(DecodeWire(summary[0].bytes, &value));
  ASSERT_EQ(value.size(), 2u);
  EXPECT_EQ(value[0].number, 1);
  EXPECT_EQ(value[0].bytes, "negative");
  EXPECT_EQ(value[1].number, 2);
  EXPECT_EQ(value[1].wire_type, 5);
  float f;
  const uint32_t bits = static_cast<uint32_t>(value[1].varint);
  std::memcpy(&f, &bits, 4);
  EXPECT_EQ(f, -2.5f);

  // Zero is written explicitly (TensorBoard would ignore a Value without simple_value).
  fields.clear();
  ASSERT_TRUE(DecodeWire((*records)[1], &fields));
  summary.clear();
  ASSERT_TRUE(DecodeWire(fields.back().bytes, &summary));
  ASSERT_EQ(summary.size(), 3u);
  value.clear();
  ASSERT_TRUE(DecodeWire(summary[2].bytes, &value));
  ASSERT_EQ(value.size(), 2u);
  EXPECT_EQ(value[1].number, 2);
  EXPECT_EQ(value[1].varint, 0u);
}

TEST(TensorBoardLoggerTest, SecondFileOfTheSameSecondGetsASuffix) {
  const std::string dir = TestDir("tb_suffix");
  TensorBoardLoggerOptions options;
  options.hostname = "h";
  options.start_time = 42;
  auto a = TensorBoardLogger::Create(dir, options);
  auto b = TensorBoardLogger::Create(dir, options);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ((*a)->path(), dir + "/events.out.tfevents.42.h");
  EXPECT_EQ((*b)->path(), dir + "/events.out.tfevents.42.h.1");
  ASSERT_TRUE((*a)->Log("x", 1, 1).ok());
  ASSERT_TRUE((*b)->Close().ok());
  auto ra = ReadTFRecordFile((*a)->path());
  auto rb = ReadTFRecordFile((*b)->path());
  ASSERT_TRUE(ra.ok() && rb.ok());
  EXPECT_EQ(ra->size(), 2u);
  EXPECT_EQ(rb->size(), 1u);
}

}  // namespace
}  // namespace cctune
