#include "data/parquet_records.h"

#include <fstream>
#include <sstream>
#include <string>

#include "core/random.h"
#include "data/json_records.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cctune {
namespace {

using ::testing::HasSubstr;

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The fixtures come from data/testdata/make_parquet.py (pyarrow); *.expected.jsonl hold the
// rows it wrote, which pyarrow read back identically.
void ExpectSameRows(const std::string& parquet, const std::string& expected) {
  auto got = ReadParquetRecords(parquet);
  ASSERT_TRUE(got.ok()) << got.status();
  auto want = ReadJsonRecords(expected);
  ASSERT_TRUE(want.ok()) << want.status();
  ASSERT_EQ(got->records.size(), want->records.size());
  for (size_t i = 0; i < want->records.size(); ++i) {
    EXPECT_EQ(got->records[i].value, want->records[i].value) << parquet << " row " << i;
    EXPECT_EQ(got->records[i].line, static_cast<int64_t>(i) + 1);
  }
}

void ExpectRows(const std::string& parquet) {
  ExpectSameRows(parquet, "data/testdata/rows.expected.jsonl");
  auto got = ReadParquetRecords(parquet);
  ASSERT_TRUE(got.ok()) << got.status();
  // A null, an empty string and a non-ASCII one.
  EXPECT_TRUE(got->records[5].value["output"].is_null());
  EXPECT_EQ(got->records[1].value["input"], "");
  EXPECT_EQ(got->records[3].value["input"], "input \xC3\xBCn\xC3\xAF 3");
}

TEST(ParquetRecordsTest, SnappyDictionaryPagesV1) {
  ExpectRows("data/testdata/rows_snappy.parquet");
}

TEST(ParquetRecordsTest, UncompressedPlainPagesV2) {
  ExpectRows("data/testdata/rows_v2_plain.parquet");
}

// Lists of structs (with empty and null lists, null elements and fields), structs and lists
// of integers, assembled from repetition and definition levels.
TEST(ParquetRecordsTest, NestedListsAndStructs) {
  ExpectSameRows("data/testdata/rows_nested.parquet", "data/testdata/rows_nested.expected.jsonl");
  ExpectSameRows("data/testdata/rows_nested_v2.parquet",
                 "data/testdata/rows_nested.expected.jsonl");
  auto got = ReadParquetRecords("data/testdata/rows_nested.parquet");
  ASSERT_TRUE(got.ok()) << got.status();
  const nlohmann::json& r2 = got->records[2].value;
  ASSERT_TRUE(r2["conversations"].is_array());
  ASSERT_EQ(r2["conversations"].size(), 3u);
  EXPECT_EQ(r2["conversations"][2]["from"], "gpt");
  EXPECT_EQ(r2["conversations"][2]["value"], "G2");
  EXPECT_TRUE(got->records[3].value["conversations"].empty());    // []
  EXPECT_TRUE(got->records[5].value["conversations"].is_null());  // null
}

TEST(ParquetRecordsTest, ReadRecordsFileDispatchesOnExtension) {
  auto parquet = ReadRecordsFile("data/testdata/rows_snappy.parquet");
  ASSERT_TRUE(parquet.ok()) << parquet.status();
  EXPECT_EQ(parquet->records.size(), 300u);
  auto json = ReadRecordsFile("data/testdata/text.jsonl");
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_FALSE(json->records.empty());
}

TEST(ParquetRecordsTest, UnreadablePartsAreNamed) {
  auto grid = ReadParquetRecords("data/testdata/list_of_lists.parquet");
  EXPECT_EQ(grid.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(grid.status().message()),
              HasSubstr("column 'grid.list.element.list.element' is nested in more than one list"));
  auto map = ReadParquetRecords("data/testdata/map.parquet");
  EXPECT_EQ(map.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(map.status().message()), HasSubstr("column 'attrs' is a map"));
  auto zstd = ReadParquetRecords("data/testdata/zstd.parquet");
  EXPECT_EQ(zstd.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(zstd.status().message()),
              HasSubstr("zstd.parquet: column 'text': it is compressed with ZSTD"));
  EXPECT_THAT(std::string(zstd.status().message()), HasSubstr("convert the file to JSON lines"));
  EXPECT_EQ(ReadParquetRecords("/no/such.parquet").status().code(), absl::StatusCode::kNotFound);
}

TEST(ParquetRecordsTest, DamagedFilesAreErrorsNotCrashes) {
  for (const char* fixture :
       {"data/testdata/rows_snappy.parquet", "data/testdata/rows_nested.parquet"}) {
    const std::string good = Slurp(fixture);
    ASSERT_GT(good.size(), 1000u);
    EXPECT_EQ(ParseParquetRecords(good.substr(0, good.size() / 2), "half.parquet").status().code(),
              absl::StatusCode::kDataLoss);
    EXPECT_EQ(ParseParquetRecords("PAR1", "tiny.parquet").status().code(),
              absl::StatusCode::kDataLoss);
    // Random byte changes anywhere: an error or (rarely) rows, never a crash or a hang.
    Generator rng(7);
    int errors = 0;
    for (int trial = 0; trial < 400; ++trial) {
      std::string bad = good;
      for (int k = 0; k < 3; ++k) {
        bad[rng.NextUint32() % bad.size()] = static_cast<char>(rng.NextUint32());
      }
      errors += !ParseParquetRecords(bad, "bad.parquet").ok();
    }
    EXPECT_GT(errors, 0);
  }
}

}  // namespace
}  // namespace cctune
