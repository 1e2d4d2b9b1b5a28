#include "config/node.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "config/yaml_loader.h"
#include "core/random.h"
#include "core/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cctune {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Kind = ConfigNode::Kind;

std::string Msg(const absl::Status& s) { return std::string(s.message()); }

// How torchtune's loader (OmegaConf on PyYAML) types these unquoted scalars; written out by
// hand from the YAML 1.1 resolver rules, not computed.
struct Typed {
  const char* text;
  Kind kind;
  double value;  // bool as 0/1, int and float as their value; unused for null/string
};

const Typed kTable[] = {
    {"", Kind::kNull, 0},          {"~", Kind::kNull, 0},
    {"null", Kind::kNull, 0},      {"Null", Kind::kNull, 0},
    {"NULL", Kind::kNull, 0},      {"nUll", Kind::kString, 0},
    {"true", Kind::kBool, 1},      {"True", Kind::kBool, 1},
    {"TRUE", Kind::kBool, 1},      {"yes", Kind::kBool, 1},
    {"On", Kind::kBool, 1},        {"false", Kind::kBool, 0},
    {"No", Kind::kBool, 0},        {"OFF", Kind::kBool, 0},
    {"tRUE", Kind::kString, 0},    {"0", Kind::kInt, 0},
    {"-0", Kind::kInt, 0},         {"+17", Kind::kInt, 17},
    {"-300", Kind::kInt, -300},    {"1_000", Kind::kInt, 1000},
    {"0x1F", Kind::kInt, 31},      {"-0x10", Kind::kInt, -16},
    {"0b101", Kind::kInt, 5},      {"0755", Kind::kInt, 493},
    {"09", Kind::kString, 0},      {"1.5", Kind::kFloat, 1.5},
    {"1.", Kind::kFloat, 1.0},     {".5", Kind::kFloat, 0.5},
    {"-.25", Kind::kFloat, -0.25}, {"2e-5", Kind::kFloat, 2e-5},
    {"1E5", Kind::kFloat, 1e5},    {"-3.5e+2", Kind::kFloat, -350},
    {"1_0.5", Kind::kFloat, 10.5}, {"inf", Kind::kString, 0},
    {"e5", Kind::kString, 0},      {"1e", Kind::kString, 0},
    {"1.2.3", Kind::kString, 0},   {"bf16", Kind::kString, 0},
    {"./out", Kind::kString, 0},   {"${a.b}", Kind::kString, 0},
    {"0x_", Kind::kString, 0},     {"1__0", Kind::kInt, 10},
    {"0o17", Kind::kString, 0},    {"+.5e1", Kind::kFloat, 5},
    {".e5", Kind::kString, 0},     {"-", Kind::kString, 0},
    {".", Kind::kString, 0},       {"+.INF", Kind::kFloat, HUGE_VAL},
    {"12:30", Kind::kString, 0},  // YAML 1.1 base 60; not supported, stays a string
};

TEST(ResolvePlainScalarTest, TypesLikeTorchtune) {
  for (const Typed& t : kTable) {
    SCOPED_TRACE(t.text);
    auto node = ResolvePlainScalar(t.text, Location{"f.yaml", 3, 1});
    ASSERT_TRUE(node.ok()) << node.status();
    ASSERT_EQ(node->kind(), t.kind) << ConfigNode::KindName(node->kind());
    EXPECT_EQ(node->text(), t.text);
    EXPECT_EQ(node->location().line, 3);
    switch (t.kind) {
      case Kind::kBool:
        EXPECT_EQ(node->bool_value(), t.value != 0);
        break;
      case Kind::kInt:
        EXPECT_EQ(node->int_value(), static_cast<int64_t>(t.value));
        break;
      case Kind::kFloat:
        EXPECT_DOUBLE_EQ(node->float_value(), t.value);
        break;
      case Kind::kString:
        EXPECT_EQ(node->string_value(), t.text);
        break;
      default:
        break;
    }
  }
}

TEST(ResolvePlainScalarTest, SpecialFloatsAndInt64Limits) {
  EXPECT_TRUE(std::isinf(ResolvePlainScalar(".inf", {})->float_value()));
  EXPECT_LT(ResolvePlainScalar("-.Inf", {})->float_value(), 0);
  EXPECT_TRUE(std::isnan(ResolvePlainScalar(".NaN", {})->float_value()));
  EXPECT_EQ(ResolvePlainScalar("9223372036854775807", {})->int_value(),
            std::numeric_limits<int64_t>::max());
  EXPECT_EQ(ResolvePlainScalar("-9223372036854775808", {})->int_value(),
            std::numeric_limits<int64_t>::min());
  auto too_big = ResolvePlainScalar("9223372036854775808", Location{"c.yaml", 7, 3});
  ASSERT_FALSE(too_big.ok());
  EXPECT_THAT(Msg(too_big.status()), HasSubstr("c.yaml:7"));
  EXPECT_THAT(Msg(too_big.status()), HasSubstr("9223372036854775808"));
}

TEST(SplitKeyTest, DotsAndBrackets) {
  EXPECT_THAT(*SplitKey("a"), ElementsAre("a"));
  EXPECT_THAT(*SplitKey("a.b.c"), ElementsAre("a", "b", "c"));
  EXPECT_THAT(*SplitKey("a.b[2].c"), ElementsAre("a", "b", "2", "c"));
  EXPECT_THAT(*SplitKey("a[0][1]"), ElementsAre("a", "0", "1"));
  EXPECT_THAT(*SplitKey("files.1"), ElementsAre("files", "1"));
  for (const char* bad : {"", ".a", "a.", "a..b", "a[", "a[x]", "a]", "[0]", "a[0]b", "a[-1]"}) {
    EXPECT_FALSE(SplitKey(bad).ok()) << bad;
  }
}

ConfigNode Load(const std::string& yaml) {
  auto node = LoadYamlString(yaml, "cfg/test.yaml");
  CCTUNE_CHECK_OK(node);
  return *node;
}

constexpr char kConfig[] = R"(model:
  _component_: cctune.models.llama2c
  num_layers: 6
  dim: 288.5
  name: "6"
  use_cache: yes
files: [a.bin, b.bin, 3]
ints: [1, 2, -3]
floats: [1, 2.5]
absent_value: null
)";

TEST(ConfigNodeTest, TypedAccessorsReturnValues) {
  ConfigNode root = Load(kConfig);
  EXPECT_EQ(*root.GetInt("model.num_layers"), 6);
  EXPECT_EQ(*root.GetAs<int>("model.num_layers"), 6);
  EXPECT_DOUBLE_EQ(*root.GetFloat("model.dim"), 288.5);
  EXPECT_DOUBLE_EQ(*root.GetFloat("model.num_layers"), 6.0);  // ints widen to floats
  EXPECT_EQ(*root.GetString("model.name"), "6");
  EXPECT_TRUE(*root.GetBool("model.use_cache"));
  EXPECT_THAT(*root.GetList<int64_t>("ints"), ElementsAre(1, 2, -3));
  EXPECT_THAT(*root.GetList<double>("floats"), ElementsAre(1.0, 2.5));
  EXPECT_EQ(*root.GetString("files[1]"), "b.bin");
  EXPECT_EQ(*root.GetString("files.0"), "a.bin");
  const ConfigNode* model = *root.Get("model");
  EXPECT_EQ(model->path(), "model");
  EXPECT_EQ(*model->GetInt("num_layers"), 6);  // keys are relative to the node
  EXPECT_TRUE(model->IsComponent());
  EXPECT_EQ(model->ComponentName(), "cctune.models.llama2c");
}

TEST(ConfigNodeTest, TypeErrorsNameFileLineKeyExpectedAndActual) {
  ConfigNode root = Load(kConfig);
  auto s = root.GetString("model.num_layers");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(Msg(s.status()),
            "cfg/test.yaml:3: key 'model.num_layers': expected string, got int 6 (quote it, "
            "e.g. \"6\", to make it a string)");
  auto i = root.GetInt("model.dim");
  ASSERT_FALSE(i.ok());
  EXPECT_EQ(Msg(i.status()), "cfg/test.yaml:4: key 'model.dim': expected int, got float 288.5");
  auto from_string = root.GetInt("model.name");
  ASSERT_FALSE(from_string.ok());
  EXPECT_THAT(Msg(from_string.status()),
              HasSubstr("cfg/test.yaml:5: key 'model.name': expected int, got string '6'"));
  auto b = root.GetBool("model.num_layers");
  ASSERT_FALSE(b.ok());
  EXPECT_THAT(Msg(b.status()), HasSubstr("expected bool, got int 6"));
  auto list = root.GetList<std::string>("files");
  ASSERT_FALSE(list.ok());  // the third item is an int
  EXPECT_THAT(Msg(list.status()),
              HasSubstr("cfg/test.yaml:7: key 'files[2]': expected string, got int 3"));
  auto not_list = root.GetList<int64_t>("model.num_layers");
  ASSERT_FALSE(not_list.ok());
  EXPECT_THAT(Msg(not_list.status()), HasSubstr("expected list, got int 6"));
  auto null_int = root.GetInt("absent_value");
  ASSERT_FALSE(null_int.ok());
  EXPECT_THAT(Msg(null_int.status()),
              HasSubstr("cfg/test.yaml:10: key 'absent_value': expected int, got null"));
}

TEST(ConfigNodeTest, MissingKeysNameTheKeyAndWhatExists) {
  ConfigNode root = Load(kConfig);
  auto s = root.GetInt("model.num_heads");
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(absl::IsNotFound(s.status()));
  EXPECT_THAT(Msg(s.status()), HasSubstr("cfg/test.yaml:1: key 'model.num_heads': missing"));
  EXPECT_THAT(Msg(s.status()), HasSubstr("_component_, num_layers, dim, name, use_cache"));
  auto through_scalar = root.GetInt("model.num_layers.x");
  ASSERT_FALSE(through_scalar.ok());
  EXPECT_THAT(Msg(through_scalar.status()), HasSubstr("'model.num_layers' is int 6, not a map"));
  auto past_end = root.GetString("files[3]");
  ASSERT_FALSE(past_end.ok());
  EXPECT_THAT(Msg(past_end.status()), HasSubstr("a list of 3 items"));
  EXPECT_EQ(root.Find("model.nope"), nullptr);
  EXPECT_EQ(root.Find("a..b"), nullptr);
  EXPECT_FALSE(root.Get("a..b").ok());
}

TEST(ConfigNodeTest, OptionalAndDefaultAccessors) {
  ConfigNode root = Load(kConfig);
  EXPECT_EQ(*root.GetOptionalInt("model.num_layers"), std::optional<int64_t>(6));
  EXPECT_EQ(*root.GetOptionalInt("model.missing"), std::nullopt);
  EXPECT_EQ(*root.GetOptionalString("absent_value"), std::nullopt);  // null counts as absent
  EXPECT_EQ(*root.GetOptionalFloat("model.dim"), std::optional<double>(288.5));
  EXPECT_EQ(*root.GetOptionalBool("model.use_cache"), std::optional<bool>(true));
  EXPECT_FALSE(root.GetOptionalBool("model.num_layers").ok());  // present, wrong type
  EXPECT_EQ(*root.GetOr<int64_t>("model.missing", 42), 42);
  EXPECT_EQ(*root.GetOr<int64_t>("model.num_layers", 42), 6);
  EXPECT_EQ(*root.GetOr<std::string>("absent_value", "dflt"), "dflt");
  EXPECT_FALSE(root.GetOr<std::string>("model.num_layers", "x").ok());
}

TEST(ConfigNodeTest, Int32RangeIsChecked) {
  ConfigNode root = Load("big: 4294967296\n");
  EXPECT_EQ(*root.GetInt("big"), int64_t{1} << 32);
  auto small = root.GetAs<int>("big");
  ASSERT_FALSE(small.ok());
  EXPECT_THAT(Msg(small.status()), HasSubstr("does not fit in 32 bits"));
}

TEST(ConfigNodeTest, SetEraseAndPaths) {
  ConfigNode root = ConfigNode::Map();
  ConfigNode& m = root.Set("m", ConfigNode::Map());
  m.Set("x", ConfigNode::Int(1));
  m.Set("x", ConfigNode::Int(2));  // replaces in place
  m.Set("list", ConfigNode::List({ConfigNode::String("a"), ConfigNode::Map()}));
  root.RefreshPaths("");
  EXPECT_EQ(*root.GetInt("m.x"), 2);
  EXPECT_EQ(root.Find("m")->size(), 2u);
  EXPECT_EQ(root.Find("m.list[1]")->path(), "m.list[1]");
  EXPECT_TRUE(root.MutableChild("m")->Erase("x"));
  EXPECT_FALSE(root.MutableChild("m")->Erase("x"));
  EXPECT_EQ(root.Find("m.x"), nullptr);
}

TEST(ConfigNodeTest, DescribeAndErrorFormatting) {
  EXPECT_EQ(ConfigNode::Null().Describe(), "null");
  EXPECT_EQ(ConfigNode::Float(0.6).Describe(), "float 0.6");
  EXPECT_EQ(ConfigNode::Float(2.0).text(), "2.0");
  EXPECT_EQ(ConfigNode::List({ConfigNode::Int(1)}).Describe(), "list of 1 item");
  ConfigError e{Location{"a.yaml", 4, 0}, "x.y", "bad"};
  EXPECT_EQ(e.ToString(), "a.yaml:4: key 'x.y': bad");
  EXPECT_EQ((ConfigError{Location{"a.yaml", 0, 0}, "", "bad"}).ToString(), "a.yaml: bad");
  EXPECT_TRUE(ErrorsToStatus({}).ok());
  const absl::Status two = ErrorsToStatus({e, e});
  EXPECT_THAT(Msg(two), HasSubstr("2 problems"));
  EXPECT_EQ(Location{}.ToString(), "<unknown>");
}

// Random trees (scalars of every kind, awkward strings, nesting, empty containers) must
// survive ToYaml -> load unchanged: this checks the quoting rules against the typing rules.
class RandomTree {
 public:
  explicit RandomTree(uint64_t seed) : gen_(seed) {}

  ConfigNode Make(int depth) {
    const uint64_t pick = gen_.UniformInt(depth > 2 ? 6 : 9);
    switch (pick) {
      case 0:
        return ConfigNode::Null();
      case 1:
        return ConfigNode::Bool(gen_.UniformInt(2) == 1);
      case 2: {
        const int64_t v = static_cast<int64_t>(gen_.NextUint64());
        return ConfigNode::Int(gen_.UniformInt(4) == 0 ? v : v % 1000);
      }
      case 3:
        return ConfigNode::Float((gen_.UniformDouble() - 0.5) *
                                 std::pow(10.0, static_cast<int>(gen_.UniformInt(20)) - 10));
      case 4:
      case 5:
        return ConfigNode::String(RandomString());
      case 6:
      case 7: {
        std::vector<ConfigNode::Entry> entries;
        const uint64_t n = gen_.UniformInt(4);
        for (uint64_t i = 0; i < n; ++i) {
          entries.emplace_back(absl::StrCat(RandomKey(), i), Make(depth + 1));
        }
        return ConfigNode::Map(std::move(entries));
      }
      default: {
        std::vector<ConfigNode> items;
        const uint64_t n = gen_.UniformInt(4);
        for (uint64_t i = 0; i < n; ++i) items.push_back(Make(depth + 1));
        return ConfigNode::List(std::move(items));
      }
    }
  }

 private:
  std::string RandomString() {
    static const char* const kWords[] = {
        "true", "no",  "null", "~",  "1e5", ".5",   "0x1F", "-", "- x", "a: b", "#c", " lead",
        "trail ", "'", "\"",  "\\", "${x}", "[1]", "{a}",  "&a", "*a", "!t",  "%", "@", "`",
        "bf16", "./p", "1.2.3", "\n", "\t", "é",   ":",    "?", "x #y", "a:b", "", "0755"};
    std::string s;
    const uint64_t parts = 1 + gen_.UniformInt(3);
    for (uint64_t i = 0; i < parts; ++i) s += kWords[gen_.UniformInt(std::size(kWords))];
    return s;
  }
  std::string RandomKey() {
    static const char* const kKeys[] = {"a", "key", "null", "1", "true", "x y", "-k", "_c_"};
    return kKeys[gen_.UniformInt(std::size(kKeys))];
  }

  Generator gen_;
};

TEST(ConfigNodeTest, ToYamlRoundTripsRandomTrees) {
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    RandomTree random(seed);
    std::vector<ConfigNode::Entry> top;
    for (int i = 0; i < 4; ++i) top.emplace_back(absl::StrCat("k", i), random.Make(0));
    ConfigNode tree = ConfigNode::Map(std::move(top));
    const std::string yaml = tree.ToYaml();
    auto back = LoadYamlString(yaml, "roundtrip.yaml");
    ASSERT_TRUE(back.ok()) << "seed " << seed << ": " << back.status() << "\n" << yaml;
    EXPECT_EQ(*back, tree) << "seed " << seed << "\n" << yaml << "---\n" << back->ToYaml();
  }
}

TEST(ConfigNodeTest, EqualityDistinguishesKindsAndOrder) {
  EXPECT_NE(ConfigNode::Int(1), ConfigNode::Float(1.0));
  EXPECT_NE(ConfigNode::String("1"), ConfigNode::Int(1));
  EXPECT_EQ(ConfigNode::Float(std::nan("")), ConfigNode::Float(std::nan("")));
  ConfigNode ab = ConfigNode::Map({{"a", ConfigNode::Int(1)}, {"b", ConfigNode::Int(2)}});
  ConfigNode ba = ConfigNode::Map({{"b", ConfigNode::Int(2)}, {"a", ConfigNode::Int(1)}});
  EXPECT_NE(ab, ba);
}

// Found by config/yaml_fuzzer: "!!float 3" printed as 3, which loads back as an int.
TEST(NodeTest, ToYamlKeepsExplicitFloatsFloats) {
  auto root = LoadYamlString("f: !!float 3\ng: !!float 0x10\nh: 2.50\n");
  ASSERT_TRUE(root.ok()) << root.status();
  auto again = LoadYamlString(root->ToYaml());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, *root) << root->ToYaml();
  EXPECT_EQ(again->Find("f")->kind(), ConfigNode::Kind::kFloat);
  EXPECT_EQ(again->Find("h")->text(), "2.50");  // the spelling stays when it reads back
}

}  // namespace
}  // namespace cctune

namespace cctune {
namespace {

TEST(NodeTest, DepthCountsLevelsOfListsAndMaps) {
  EXPECT_EQ(ConfigNode::Int(3).Depth(), 0);
  auto root = LoadYamlString("a: 1\nb: [1, [2, {c: [3]}]]\nd: {}\n", "d.yaml");
  ASSERT_TRUE(root.ok()) << root.status();
  EXPECT_EQ(root->Depth(), 5);  // root map, b, [2, ...], {c: ...}, [3]
  EXPECT_EQ(root->Find("d")->Depth(), 1);
  EXPECT_EQ(root->Find("b")->Depth(), 4);
}

}  // namespace
}  // namespace cctune
