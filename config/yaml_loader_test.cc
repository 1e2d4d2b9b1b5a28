#include "config/yaml_loader.h"

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include "absl/strings/str_cat.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cctune {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using Kind = ConfigNode::Kind;

std::string Msg(const absl::Status& s) { return std::string(s.message()); }

TEST(YamlLoaderTest, EveryNodeKnowsItsLineAndPath) {
  auto root = LoadYamlString(
      "# comment\n"
      "a: 1\n"
      "model:\n"
      "  _component_: x\n"
      "\n"
      "  inner:\n"
      "    deep: true\n"
      "list:\n"
      "  - 10\n"
      "  - k: v\n"
      "empty:\n",
      "f.yaml");
  ASSERT_TRUE(root.ok()) << root.status();
  EXPECT_EQ(root->Find("a")->location().line, 2);
  EXPECT_EQ(root->Find("model")->location().line, 3);
  EXPECT_EQ(root->Find("model._component_")->location().line, 4);
  EXPECT_EQ(root->Find("model.inner.deep")->location().line, 7);
  EXPECT_EQ(root->Find("model.inner.deep")->path(), "model.inner.deep");
  EXPECT_EQ(root->Find("list[0]")->location().line, 9);
  EXPECT_EQ(root->Find("list[1].k")->location().line, 10);
  EXPECT_EQ(root->Find("list[1].k")->path(), "list[1].k");
  // An empty value takes its key's line, not the next line's.
  EXPECT_EQ(root->Find("empty")->location().line, 11);
  EXPECT_TRUE(root->Find("empty")->IsNull());
  EXPECT_EQ(root->Find("a")->location().source, "f.yaml");
  EXPECT_EQ(root->Find("model.inner.deep")->location().column, 5);  // where the key starts
  EXPECT_THAT(root->Keys(), ElementsAre("a", "model", "list", "empty"));  // file order
}

TEST(YamlLoaderTest, QuotedScalarsStayStringsAndPlainOnesAreTyped) {
  auto root = LoadYamlString(
      "i: 5\n"
      "s: \"5\"\n"
      "s2: '5'\n"
      "t: !!str 5\n"
      "n: null\n"
      "qn: 'null'\n"
      "b: True\n"
      "qb: \"true\"\n"
      "f: 2e-5\n"
      "ff: !!float 3\n"
      "tn: !!null ''\n"
      "flow: [1, \"2\", three, 4.5, null]\n"
      "fm: {a: 1, b: x}\n");
  ASSERT_TRUE(root.ok()) << root.status();
  EXPECT_EQ(root->Find("i")->kind(), Kind::kInt);
  EXPECT_EQ(root->Find("s")->kind(), Kind::kString);
  EXPECT_EQ(root->Find("s2")->kind(), Kind::kString);
  EXPECT_EQ(root->Find("t")->kind(), Kind::kString);
  EXPECT_EQ(root->Find("n")->kind(), Kind::kNull);
  EXPECT_EQ(*root->GetString("qn"), "null");
  EXPECT_EQ(*root->GetBool("b"), true);
  EXPECT_EQ(*root->GetString("qb"), "true");
  EXPECT_DOUBLE_EQ(*root->GetFloat("f"), 2e-5);
  EXPECT_EQ(root->Find("f")->kind(), Kind::kFloat);
  EXPECT_EQ(root->Find("ff")->kind(), Kind::kFloat);
  EXPECT_EQ(root->Find("tn")->kind(), Kind::kNull);
  const ConfigNode* flow = root->Find("flow");
  ASSERT_EQ(flow->size(), 5u);
  EXPECT_EQ(flow->items()[0].kind(), Kind::kInt);
  EXPECT_EQ(flow->items()[1].kind(), Kind::kString);
  EXPECT_EQ(flow->items()[2].kind(), Kind::kString);
  EXPECT_EQ(flow->items()[3].kind(), Kind::kFloat);
  EXPECT_EQ(flow->items()[4].kind(), Kind::kNull);
  EXPECT_EQ(*root->GetString("fm.b"), "x");
}

TEST(YamlLoaderTest, AnchorsAndAliasesCopyValues) {
  auto root = LoadYamlString("base: &b {x: 1}\nother: *b\n");
  ASSERT_TRUE(root.ok()) << root.status();
  EXPECT_EQ(*root->GetInt("other.x"), 1);
}

TEST(YamlLoaderTest, MalformedYamlNamesFileLineAndColumn) {
  auto bad = LoadYamlString("a: 1\nb: [1, 2\nc: 3\n", "configs/bad.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status()));
  // yaml-cpp notices the unclosed list where the next key starts.
  EXPECT_THAT(Msg(bad.status()), StartsWith("configs/bad.yaml:3:2: malformed YAML: "));
  auto indent = LoadYamlString("a: 1\n  b: 2\n", "configs/indent.yaml");
  ASSERT_FALSE(indent.ok());
  EXPECT_THAT(Msg(indent.status()), StartsWith("configs/indent.yaml:2:"));
  auto flow = LoadYamlString("a: {b: 1}}\n", "x.yaml");
  ASSERT_FALSE(flow.ok());
  EXPECT_THAT(Msg(flow.status()), StartsWith("x.yaml:1:"));
}

TEST(YamlLoaderTest, StructuralErrorsAreReportedTogether) {
  auto dup = LoadYamlString("a: 1\nb: 2\na: 3\nc:\n  x: 1\n  x: 2\n", "d.yaml");
  ASSERT_FALSE(dup.ok());
  EXPECT_THAT(Msg(dup.status()), HasSubstr("d.yaml:3: key 'a': duplicate key (first defined at "
                                           "line 1)"));
  EXPECT_THAT(Msg(dup.status()), HasSubstr("d.yaml:6: key 'c.x': duplicate key"));
  auto dotted = LoadYamlString("model.num_layers: 2\n", "k.yaml");
  ASSERT_FALSE(dotted.ok());
  EXPECT_THAT(Msg(dotted.status()), HasSubstr("k.yaml:1: key 'model.num_layers': keys may not "
                                              "contain '.'"));
  auto complex_key = LoadYamlString("? [a]\n: 1\n", "c.yaml");
  ASSERT_FALSE(complex_key.ok());
  EXPECT_THAT(Msg(complex_key.status()), HasSubstr("map keys must be plain strings"));
  auto tag = LoadYamlString("a: !custom 3\n", "t.yaml");
  ASSERT_FALSE(tag.ok());
  EXPECT_THAT(Msg(tag.status()), HasSubstr("t.yaml:1: key 'a': unsupported YAML tag '!custom'"));
  auto bad_int = LoadYamlString("a: !!int abc\n", "t.yaml");
  ASSERT_FALSE(bad_int.ok());
  EXPECT_THAT(Msg(bad_int.status()), HasSubstr("'abc' is not a valid !!int"));
  auto overflow = LoadYamlString("x: 1\nbig: 99999999999999999999\n", "o.yaml");
  ASSERT_FALSE(overflow.ok());
  EXPECT_THAT(Msg(overflow.status()), HasSubstr("o.yaml:2: key 'big'"));
}

TEST(YamlLoaderTest, TopLevelMustBeOneMap) {
  auto empty = LoadYamlString("", "e.yaml");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->IsMap());
  EXPECT_EQ(empty->size(), 0u);
  auto comments = LoadYamlString("# only a comment\n", "e.yaml");
  ASSERT_TRUE(comments.ok());
  EXPECT_TRUE(comments->IsMap());
  auto list = LoadYamlString("- a\n- b\n", "l.yaml");
  ASSERT_FALSE(list.ok());
  EXPECT_THAT(Msg(list.status()), HasSubstr("l.yaml:1: the top level of a config must be a map"));
  auto scalar = LoadYamlString("hello\n", "s.yaml");
  ASSERT_FALSE(scalar.ok());
  EXPECT_THAT(Msg(scalar.status()), HasSubstr("not a scalar"));
  auto docs = LoadYamlString("a: 1\n---\nb: 2\n", "m.yaml");
  ASSERT_FALSE(docs.ok());
  EXPECT_THAT(Msg(docs.status()), HasSubstr("m.yaml: holds 2 YAML documents"));
}

TEST(YamlLoaderTest, LoadsTestdataFiles) {
  auto root = LoadYamlFile("config/testdata/generation.yaml");
  ASSERT_TRUE(root.ok()) << root.status();
  EXPECT_EQ(root->Find("model")->ComponentName(), "torchtune.models.llama2c.stories");
  EXPECT_EQ(root->Find("model.num_layers")->location().line, 7);
  EXPECT_EQ(root->Find("model.num_layers")->location().source, "config/testdata/generation.yaml");
  EXPECT_THAT(*root->GetList<std::string>("checkpointer.checkpoint_files"),
              ElementsAre("stories260K.bin"));
  EXPECT_EQ(*root->GetString("checkpointer.output_dir"), "${output_dir}");  // not resolved here
  EXPECT_TRUE(*root->GetBool("enable_kv_cache"));
  EXPECT_DOUBLE_EQ(*root->GetFloat("temperature"), 0.0);
  EXPECT_TRUE(root->Find("quantizer")->IsNull());

  auto bad = LoadYamlFile("config/testdata/malformed.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(Msg(bad.status()), StartsWith("config/testdata/malformed.yaml:7:"));
}

TEST(YamlLoaderTest, MissingFileIsNotFound) {
  auto missing = LoadYamlFile("config/testdata/no_such_file.yaml");
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(absl::IsNotFound(missing.status()));
  EXPECT_THAT(Msg(missing.status()), HasSubstr("config/testdata/no_such_file.yaml"));
}

TEST(YamlLoaderTest, ParseYamlValueUsesTheGivenLocation) {
  const Location loc{"command-line override 'x=[1, a]'", 0, 0};
  auto list = ParseYamlValue("[1, a, '3']", loc);
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->size(), 3u);
  EXPECT_EQ(list->items()[0].kind(), Kind::kInt);
  EXPECT_EQ(list->items()[2].kind(), Kind::kString);
  EXPECT_EQ(list->items()[1].location().source, loc.source);
  auto bad = ParseYamlValue("[1, 2", loc);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(Msg(bad.status()), StartsWith("command-line override 'x=[1, a]': malformed YAML"));
}

TEST(YamlLoaderTest, DeepNestingIsAnErrorNotACrash) {
  std::string deep(20000, '[');
  auto r = LoadYamlString("a: " + deep + "\n", "deep.yaml");
  EXPECT_FALSE(r.ok());
}

TEST(YamlLoaderTest, SelfReferentialAliasIsAnError) {
  // 11 bytes that used to recurse until the stack ran out.
  for (const char* yaml : {"&a {b: *a}\n", "x: &a [*a]\n", "x: &a {y: [1, {z: *a}]}\n"}) {
    auto r = LoadYamlString(yaml, "cycle.yaml");
    ASSERT_FALSE(r.ok()) << yaml;
    EXPECT_THAT(Msg(r.status()), HasSubstr("cycle.yaml:1")) << yaml;
    EXPECT_THAT(Msg(r.status()), HasSubstr("refers to a value that contains it")) << yaml;
  }
  // The same through a command-line override value.
  auto v = ParseYamlValue("&a [*a]", Location{"command-line override 'x=&a [*a]'", 0, 0});
  ASSERT_FALSE(v.ok());
  EXPECT_THAT(Msg(v.status()), HasSubstr("command-line override 'x=&a [*a]'"));
}

TEST(YamlLoaderTest, AliasesAreExpandedUpToASizeLimit) {
  // Billion laughs: 10^9 values from a few hundred bytes.
  std::string yaml = "l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 9; ++i) {
    absl::StrAppend(&yaml, "l", i, ": &l", i, " [");
    for (int j = 0; j < 10; ++j) absl::StrAppend(&yaml, j ? ", " : "", "*l", i - 1);
    absl::StrAppend(&yaml, "]\n");
  }
  auto r = LoadYamlString(yaml, "laughs.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(Msg(r.status()), HasSubstr("laughs.yaml:"));
  EXPECT_THAT(Msg(r.status()), HasSubstr(absl::StrCat(kMaxConfigValues)));
  // Ordinary aliases still expand, each use a copy.
  auto ok = LoadYamlString("a: &x {k: [1, 2]}\nb: *x\nc: [*x, *x]\n", "ok.yaml");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(*ok->Find("b"), *ok->Find("a"));
  EXPECT_EQ(ok->Find("c[1].k[1]")->int_value(), 2);
  EXPECT_EQ(ok->Find("c[1].k[1]")->path(), "c[1].k[1]");
}

TEST(YamlLoaderTest, NestingDeeperThanTheLimitIsAnErrorNamingLineAndLimit) {
  const std::string ok_deep = std::string(kMaxConfigDepth - 1, '[') +
                              std::string(kMaxConfigDepth - 1, ']');
  EXPECT_TRUE(LoadYamlString("a: " + ok_deep + "\n").ok());
  for (int depth : {kMaxConfigDepth + 1, 1000, 5000}) {
    const std::string deep = std::string(depth, '[') + std::string(depth, ']');
    auto r = LoadYamlString("ok: 1\na: " + deep + "\n", "deep.yaml");
    ASSERT_FALSE(r.ok()) << depth;
    EXPECT_THAT(Msg(r.status()), HasSubstr("deep.yaml:2")) << depth;
    EXPECT_THAT(Msg(r.status()), HasSubstr(absl::StrCat(kMaxConfigDepth))) << depth;
  }
  // Block maps nest too.
  std::string block;
  for (int i = 0; i <= kMaxConfigDepth; ++i) {
    absl::StrAppend(&block, std::string(i * 2, ' '), "k", i, ":\n");
  }
  auto r = LoadYamlString(block, "block.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(Msg(r.status()), HasSubstr(absl::StrCat(kMaxConfigDepth)));
  auto v = ParseYamlValue(std::string(1000, '['), Location{"override", 0, 0});
  EXPECT_FALSE(v.ok());
}

TEST(YamlLoaderTest, HundredThousandKeysLoadAndDuplicatesAreStillFound) {
  constexpr int kKeys = 100000;
  std::string yaml;
  for (int i = 0; i < kKeys; ++i) absl::StrAppend(&yaml, "key_", i, ": ", i, "\n");
  auto root = LoadYamlString(yaml, "big.yaml");
  ASSERT_TRUE(root.ok()) << root.status();
  ASSERT_EQ(root->size(), static_cast<size_t>(kKeys));
  EXPECT_EQ(root->Find("key_99999")->int_value(), 99999);
  EXPECT_EQ(root->Find("key_123")->location().line, 124);
  absl::StrAppend(&yaml, "key_5: again\n");
  auto dup = LoadYamlString(yaml, "big.yaml");
  ASSERT_FALSE(dup.ok());
  EXPECT_THAT(Msg(dup.status()), HasSubstr("big.yaml:100001: key 'key_5': duplicate key "
                                           "(first defined at line 6)"));
}

TEST(YamlLoaderTest, NonUtf8AndControlBytesAreErrorsOrStringsNeverCrashes) {
  for (std::string yaml : {std::string("a: \xff\xfe\n"), std::string("\xc3\x28: 1\n"),
                           std::string("a: \"\\xff\"\n"), std::string("a: b\0c\n", 7),
                           std::string("\xef\xbb\xbf" "a: 1\n"), std::string("a: \x01\n")}) {
    auto r = LoadYamlString(yaml, "bytes.yaml");
    if (!r.ok()) {
      EXPECT_THAT(Msg(r.status()), HasSubstr("bytes.yaml")) << yaml;
    }
  }
}

// Found by config/yaml_fuzzer: yaml-cpp 0.7's LoadAll loops forever, allocating, on a ','
// outside flow collections.
TEST(YamlLoaderTest, StrayCommaIsAnErrorNotAHang) {
  for (const char* yaml : {",", ", 1", "- a\n,", "---\n,", "# c\n,", "&a!!null ,1.2a}l"}) {
    auto r = LoadYamlString(yaml, "comma.yaml");
    ASSERT_FALSE(r.ok()) << yaml;
    EXPECT_THAT(Msg(r.status()), HasSubstr("comma.yaml:")) << yaml;
    EXPECT_THAT(Msg(r.status()), HasSubstr("malformed YAML")) << yaml;
  }
  EXPECT_FALSE(ParseYamlValue(",", Location{"override", 0, 0}).ok());
  // Several documents are still counted as such.
  auto three = LoadYamlString("a: 1\n---\nb: 2\n---\nc: 3\n---\nd: 4\n", "m.yaml");
  EXPECT_THAT(Msg(three.status()), HasSubstr("m.yaml: holds 3 or more YAML documents"));
}

// Found by config/yaml_fuzzer: "{\xfe\xff\xff\xb6}" loaded, printed as YAML starting with
// FE FF, which yaml-cpp then read as UTF-16.
TEST(YamlLoaderTest, NonUtf8IsAnErrorNamingLineAndColumn) {
  auto r = LoadYamlString("{\xfe\xff\xff\xb6}", "bytes.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(Msg(r.status()), HasSubstr("bytes.yaml:1:2: not UTF-8 text (byte 0xfe)"));
  r = LoadYamlString("a: 1\nb: caf\xe9\n", "latin1.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(Msg(r.status()), HasSubstr("latin1.yaml:2:7: not UTF-8 text (byte 0xe9)"));
  // Overlong forms, surrogates and truncated sequences are not UTF-8 either.
  for (const char* bad : {"a: \xc0\xaf\n", "a: \xed\xa0\x80\n", "a: \xf4\x90\x80\x80\n",
                          "a: \xe2\x82\n"}) {
    EXPECT_FALSE(LoadYamlString(bad).ok()) << bad;
  }
  EXPECT_FALSE(ParseYamlValue("'\xff'", Location{"override", 0, 0}).ok());
  // Well-formed UTF-8, a BOM included, loads.
  auto ok = LoadYamlString("\xef\xbb\xbf" "a: caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\n");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->Find("a")->string_value(), "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
}

// Found by config/yaml_fuzzer: ":c\0_:" loaded with a key that yaml-cpp had turned into bytes
// that are not UTF-8. YAML (and PyYAML, torchtune's loader) allows no control characters
// but tab, LF and CR in a stream.
TEST(YamlLoaderTest, ControlCharactersAreAnError) {
  auto r = LoadYamlString(std::string(":c\0_:", 5), "nul.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(Msg(r.status()), HasSubstr("nul.yaml:1:3: control character U+0000"));
  for (const char* bad : {"a: \x01\n", "a: \x7f\n", "a: \xc2\x80\n", "a: \xef\xbf\xbf\n"}) {
    EXPECT_FALSE(LoadYamlString(bad).ok()) << bad;
  }
  auto ok = LoadYamlString("a:\tb\r\nc: \"\\x00\\x01\"\nd: \xc2\x85\ne: \"\\x80\\uffff\"\n");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->Find("c")->string_value(), std::string("\0\x01", 2));  // escapes are fine
  auto again = LoadYamlString(ok->ToYaml());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, *ok);
}


// Fuzz findings (config/fuzz/yaml_corpus/found_roundtrip_*): values that load must print
// (ToYaml) to YAML that loads back to an equal tree.
void ExpectRoundTrip(const std::string& text) {
  SCOPED_TRACE(text);
  auto root = LoadYamlString(text, "in.yaml");
  ASSERT_TRUE(root.ok()) << root.status();
  const std::string yaml = root->ToYaml();
  auto again = LoadYamlString(yaml, "again.yaml");
  ASSERT_TRUE(again.ok()) << again.status() << "\n" << yaml;
  EXPECT_EQ(*again, *root) << "printed:\n" << yaml << "reprinted:\n" << again->ToYaml();
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST(YamlLoaderTest, FuzzFindingsRoundTrip) {
  ExpectRoundTrip(ReadFile("config/fuzz/yaml_corpus/found_roundtrip_cr_runs.yaml"));
  ExpectRoundTrip(ReadFile("config/fuzz/yaml_corpus/found_roundtrip_nel_escape.yaml"));
}

TEST(YamlLoaderTest, PlainScalarsFoldedOverCarriageReturnsRoundTrip) {
  ExpectRoundTrip("a: 1\nb: x\r\ry\r\n");
  ExpectRoundTrip("a: 1\nb: x\ry\n");
  ExpectRoundTrip("a: 1\nb:\r\rx\n");
  // Keys whose escaped form passes YAML's 1024-character limit on implicit keys.
  const std::string long_key = "k:" + std::string(600, '\r') + "x";
  ExpectRoundTrip("a: 1\n" + long_key + ": 2\n");
  ExpectRoundTrip("a: 1\n" + long_key + ":\n  inner: [1, 2]\n  more: {x: y}\n");
  ExpectRoundTrip("a:\n  - " + long_key + ": v\n    other: 3\n");
  ExpectRoundTrip("a: \"" + std::string(1100, 'x') + "\"\n? \"" + std::string(1100, 'y') +
                  "\"\n: 1\n");
}

TEST(YamlLoaderTest, KeysThatLookLikeDocumentMarkersRoundTrip) {
  ExpectRoundTrip(ReadFile("config/fuzz/yaml_corpus/found_roundtrip_document_marker_key.yaml"));
  ExpectRoundTrip("a: 1\n? --- b\n: x\n? ---c\n: '--- d'\ne: ['...', '---']\n");
}

TEST(YamlLoaderTest, LineBreakEscapesRoundTrip) {
  ExpectRoundTrip("a: \"\\N4YAMLParserExcu00e9\\t\\\\\"\nb: 'it''s'\n\n");
  ExpectRoundTrip("a: \"x\\Ny\"\n");
  ExpectRoundTrip("a: \"x\\Ly\\Pz\"\n");
  ExpectRoundTrip("a: \"\\N\"\n");
  ExpectRoundTrip("a: \"x\\ry\\r\"\n");
  ExpectRoundTrip("a: \"\\u2028 \\u2029 \\u0085\"\n");
  ExpectRoundTrip("a: \"\\_x\\_\"\n\"\\N\\_k\": 1\n");
  auto nbsp = LoadYamlString("a: \"\\_\\N\\u00e9\\xe9\"\n", "in.yaml");
  ASSERT_TRUE(nbsp.ok()) << nbsp.status();
  EXPECT_EQ(nbsp->Find("a")->string_value(), "\xC2\xA0\xC2\x85\xC3\xA9\xC3\xA9");
}

}  // namespace
}  // namespace cctune
