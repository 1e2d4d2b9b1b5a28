#include "config/schema.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cctune {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::string Msg(const absl::Status& s) { return std::string(s.message()); }

TEST(KeyTypeTest, Names) {
  EXPECT_EQ(KeyType::Int().Name(), "int");
  EXPECT_EQ(KeyType::Float().OrNull().Name(), "float or null");
  EXPECT_EQ(KeyType::List(KeyType::String()).Name(), "list of string");
  EXPECT_EQ(KeyType::Enum({"grouped", "expanded"}).Name(), "one of grouped|expanded");
  EXPECT_EQ(KeyType::Component("model").Name(), "model component");
  EXPECT_EQ(KeyType::Component("").Name(), "component");
  EXPECT_EQ(KeyType::Object(Schema("prompt")).Name(), "prompt map");
  EXPECT_EQ(KeyType::Any().Name(), "any value");
}

TEST(KeyTypeTest, MismatchAcceptsAndRejects) {
  const ConfigNode i = ConfigNode::Int(3), f = ConfigNode::Float(0.5), s = ConfigNode::String("x"),
                   b = ConfigNode::Bool(true), n = ConfigNode::Null(),
                   l = ConfigNode::List({ConfigNode::Int(1)}), m = ConfigNode::Map();
  // Every (type, value) pair: which values each type accepts.
  struct Row {
    KeyType type;
    std::vector<bool> accepts;  // i, f, s, b, n, l, m
  };
  const std::vector<Row> rows = {
      {KeyType::Int(), {true, false, false, false, false, false, false}},
      {KeyType::Float(), {true, true, false, false, false, false, false}},
      {KeyType::String(), {false, false, true, false, false, false, false}},
      {KeyType::Bool(), {false, false, false, true, false, false, false}},
      {KeyType::Int().OrNull(), {true, false, false, false, true, false, false}},
      {KeyType::List(KeyType::Int()), {false, false, false, false, false, true, false}},
      {KeyType::Map(), {false, false, false, false, false, false, true}},
      {KeyType::Component("model"), {false, false, false, false, false, false, true}},
      {KeyType::Enum({"x", "y"}), {false, false, true, false, false, false, false}},
      {KeyType::Any(), {true, true, true, true, true, true, true}},
  };
  const std::vector<const ConfigNode*> values = {&i, &f, &s, &b, &n, &l, &m};
  for (const Row& row : rows) {
    for (size_t v = 0; v < values.size(); ++v) {
      const std::string mismatch = row.type.Mismatch(*values[v]);
      EXPECT_EQ(mismatch.empty(), row.accepts[v])
          << row.type.Name() << " vs " << values[v]->Describe() << ": " << mismatch;
    }
  }
  EXPECT_EQ(KeyType::Enum({"grouped", "expanded"}).Mismatch(ConfigNode::String("paged")),
            "expected one of grouped|expanded, got string 'paged'");
  EXPECT_EQ(KeyType::String().Mismatch(ConfigNode::Int(7)),
            "expected string, got int 7 (quote it, e.g. \"7\", to make it a string)");
  EXPECT_THAT(KeyType::Component("tokenizer").Mismatch(ConfigNode::String("x")),
              HasSubstr("expected tokenizer component (a map with a _component_ key)"));
}

TEST(SchemaTest, DeclaresKeysInOrder) {
  Schema s("cctune.models.tiny", "A tiny model");
  s.Required("dim", KeyType::Int(), "embedding size")
      .Default("layers", KeyType::Int(), ConfigNode::Int(2), "decoder layers")
      .Optional("name", KeyType::String().OrNull(), "a label");
  EXPECT_THAT(s.KeyNames(), ElementsAre("dim", "layers", "name"));
  ASSERT_NE(s.Find("layers"), nullptr);
  EXPECT_EQ(s.Find("layers")->default_value->int_value(), 2);
  EXPECT_TRUE(s.Find("dim")->required);
  EXPECT_FALSE(s.Find("name")->required);
  EXPECT_EQ(s.Find("nope"), nullptr);
  EXPECT_TRUE(s.CheckDefinition().ok());
  EXPECT_EQ(s.Describe(),
            "  dim (int, required): embedding size\n"
            "  layers (int, default 2): decoder layers\n"
            "  name (string or null, optional): a label\n");
}

TEST(SchemaTest, MalformedDefinitionsAreReported) {
  Schema s("bad");
  s.Required("a", KeyType::Int(), "")
      .Required("a", KeyType::Int(), "")
      .Default("b", KeyType::Int(), ConfigNode::String("x"), "")
      .Default("c", KeyType::List(KeyType::Int()), ConfigNode::List({ConfigNode::Float(1.5)}), "")
      .Optional("d.e", KeyType::Int(), "")
      .Check("zzz", [](const ConfigNode&) { return absl::OkStatus(); });
  const absl::Status st = s.CheckDefinition();
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(Msg(st), HasSubstr("schema 'bad' is malformed"));
  EXPECT_THAT(Msg(st), HasSubstr("key 'a' is declared twice"));
  EXPECT_THAT(Msg(st), HasSubstr("default of key 'b': expected int, got string 'x'"));
  EXPECT_THAT(Msg(st), HasSubstr("default of key 'c': expected int, got float 1.5"));
  EXPECT_THAT(Msg(st), HasSubstr("bad key name 'd.e'"));
  EXPECT_THAT(Msg(st), HasSubstr("Check() on undeclared key 'zzz'"));
}

TEST(SchemaTest, ChecksAndUnknownKeys) {
  Schema s;
  s.Optional("t", KeyType::Float(), "").Check("t", [](const ConfigNode& n) {
    return n.float_value() < 0 ? absl::InvalidArgumentError("must be >= 0") : absl::OkStatus();
  });
  ASSERT_EQ(s.Find("t")->checks.size(), 1u);
  EXPECT_FALSE(s.Find("t")->checks[0](ConfigNode::Float(-1)).ok());
  EXPECT_TRUE(s.Find("t")->checks[0](ConfigNode::Float(1)).ok());
  EXPECT_FALSE(s.allow_unknown_keys());
  s.AllowUnknownKeys();
  EXPECT_TRUE(s.allow_unknown_keys());
  EXPECT_THAT(Schema().KeyNames(), IsEmpty());
}

TEST(KeyTypeTest, RangesRejectValuesOutsideThemAndNaN) {
  const KeyType steps = KeyType::Int().InRange(1, 1 << 20);
  EXPECT_EQ(steps.Name(), "int in [1, 1048576]");
  EXPECT_EQ(steps.Mismatch(ConfigNode::Int(1)), "");
  EXPECT_EQ(steps.Mismatch(ConfigNode::Int(1 << 20)), "");
  EXPECT_EQ(steps.Mismatch(ConfigNode::Int(0)), "must be in [1, 1048576], got 0");
  EXPECT_EQ(steps.Mismatch(ConfigNode::Int(std::numeric_limits<int64_t>::max())),
            "must be in [1, 1048576], got 9223372036854775807");
  EXPECT_EQ(steps.Mismatch(ConfigNode::Int(std::numeric_limits<int64_t>::min())),
            "must be in [1, 1048576], got -9223372036854775808");
  EXPECT_THAT(steps.Mismatch(ConfigNode::String("5")), HasSubstr("expected int in [1, 1048576]"));
  // Exact at the edge of int64, where doubles round.
  const KeyType edge = KeyType::Int().InRange(0, 9007199254740992.0);  // 2^53
  EXPECT_EQ(edge.Mismatch(ConfigNode::Int(9007199254740992)), "");
  EXPECT_NE(edge.Mismatch(ConfigNode::Int(9007199254740993)), "");

  const KeyType norm = KeyType::Float().GreaterThan(0).OrNull();
  EXPECT_EQ(norm.Name(), "float > 0 or null");
  EXPECT_EQ(norm.Mismatch(ConfigNode::Float(1.0)), "");
  EXPECT_EQ(norm.Mismatch(ConfigNode::Int(2)), "");
  EXPECT_EQ(norm.Mismatch(ConfigNode::Null()), "");
  EXPECT_THAT(norm.Mismatch(ConfigNode::Float(0.0)), HasSubstr("must be > 0"));
  EXPECT_THAT(norm.Mismatch(ConfigNode::Float(-1.0)), HasSubstr("got -1"));
  EXPECT_THAT(norm.Mismatch(ConfigNode::Float(std::nan(""))), HasSubstr("must be > 0"));
  EXPECT_THAT(norm.Mismatch(ConfigNode::Float(INFINITY)), HasSubstr("finite"));
  const KeyType temp = KeyType::Float().AtLeast(0);
  EXPECT_EQ(temp.Mismatch(ConfigNode::Float(0.0)), "");
  EXPECT_NE(temp.Mismatch(ConfigNode::Float(-0.5)), "");
}

TEST(SchemaTest, DefaultsOutsideTheirRangeAreDefinitionErrors) {
  Schema s("s");
  s.Default("n", KeyType::Int().InRange(1, 8), ConfigNode::Int(9), "n");
  EXPECT_THAT(std::string(s.CheckDefinition().message()), HasSubstr("must be in [1, 8], got 9"));
}

}  // namespace
}  // namespace cctune
