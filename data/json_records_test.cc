#include "data/json_records.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cctune {
namespace {

using ::testing::HasSubstr;

std::string Msg(const absl::Status& s) { return std::string(s.message()); }

TEST(JsonRecordsTest, JsonLinesKeepTheirLineNumbers) {
  auto r = ReadJsonRecords("data/testdata/alpaca.jsonl");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->records.size(), 4u);  // the blank line 3 is skipped
  EXPECT_EQ(r->records[0].line, 1);
  EXPECT_EQ(r->records[2].line, 4);
  EXPECT_EQ(r->records[3].line, 5);
  EXPECT_EQ(r->records[2].value["output"], "desserts");
  EXPECT_EQ(r->Where(2), "data/testdata/alpaca.jsonl:4");
}

TEST(JsonRecordsTest, ArrayElementsKeepTheLineTheyStartOn) {
  auto r = ReadJsonRecords("data/testdata/alpaca_renamed.json");
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->records.size(), 3u);
  EXPECT_EQ(r->records[0].line, 2);
  EXPECT_EQ(r->records[1].line, 7);
  EXPECT_EQ(r->records[2].line, 8);
  // Brackets, braces, commas and escaped quotes inside strings do not confuse the scan.
  auto tricky = ParseJsonRecords("[{\"a\": \"x],{\\\"\"},\n {\"a\": \"[y\"}\n,\n\n{}]", "t.json");
  ASSERT_TRUE(tricky.ok()) << tricky.status();
  ASSERT_EQ(tricky->records.size(), 3u);
  EXPECT_EQ(tricky->records[0].value["a"], "x],{\"");
  EXPECT_EQ(tricky->records[1].line, 2);
  EXPECT_EQ(tricky->records[2].line, 5);
  // A BOM and leading blank lines are fine.
  auto bom = ParseJsonRecords("\xEF\xBB\xBF\n\n{\"a\": 1}\n", "b.jsonl");
  ASSERT_TRUE(bom.ok()) << bom.status();
  EXPECT_EQ(bom->records[0].line, 3);
}

TEST(JsonRecordsTest, MalformedJsonNamesFileAndLine) {
  auto r = ReadJsonRecords("data/testdata/malformed.jsonl");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(Msg(r.status()), HasSubstr("data/testdata/malformed.jsonl:3: malformed JSON"));
  auto a = ParseJsonRecords("[\n{\"a\": 1},\n{\"a\": }\n]", "arr.json");
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(Msg(a.status()), HasSubstr("arr.json:3: malformed JSON"));
  auto line = ParseJsonRecords("{\"a\": 1}\n[1, 2]\n", "l.jsonl");
  ASSERT_FALSE(line.ok());
  EXPECT_THAT(Msg(line.status()), HasSubstr("l.jsonl:2: a JSON array, expected one object"));
  auto elem = ParseJsonRecords("[{\"a\": 1},\n \"text\"]", "e.json");
  ASSERT_FALSE(elem.ok());
  EXPECT_THAT(Msg(elem.status()), HasSubstr("e.json:2: record 1 is a JSON string"));
  EXPECT_THAT(Msg(ParseJsonRecords(" \n ", "empty.jsonl").status()), HasSubstr("empty"));
  auto missing = ReadJsonRecords("data/testdata/no_such_file.jsonl");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Msg(missing.status()), HasSubstr("no_such_file.jsonl"));
}

TEST(JsonRecordsTest, MissingColumnsNameTheColumnAndListTheOthers) {
  auto r = ReadJsonRecords("data/testdata/missing_column.jsonl");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*GetStringColumn(*r, 0, "output"), "fine");
  auto missing = GetStringColumn(*r, 1, "output");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(Msg(missing.status()),
            "data/testdata/missing_column.jsonl:2: no column 'output'; the record has columns "
            "answer, input, instruction");
  auto mapped = GetColumn(*r, 1, "response", "output");
  EXPECT_THAT(Msg(mapped.status()),
              HasSubstr("no column 'response' (column_map: output -> response)"));
  auto typed = ParseJsonRecords("{\"n\": 3}", "t.jsonl");
  ASSERT_TRUE(typed.ok());
  EXPECT_THAT(Msg(GetStringColumn(*typed, 0, "n").status()),
              HasSubstr("t.jsonl:1: column 'n' is a JSON number, expected a string"));
}

}  // namespace
}  // namespace cctune
