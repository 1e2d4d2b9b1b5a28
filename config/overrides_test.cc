#include "config/overrides.h"

#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
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

constexpr char kBase[] = R"(output_dir: /tmp/out
model:
  _component_: cctune.models.llama2c.stories
  num_layers: 6
tokenizer:
  _component_: cctune.models.llama2c.tokenizer
  path: /tmp/tok.bin
  max_seq_len: 512
files: [a.bin, b.bin]
quantizer: null
seed: 1
prompt:
  user: hi
)";

ConfigNode Base() {
  auto node = LoadYamlString(kBase, "configs/gen.yaml");
  CCTUNE_CHECK_OK(node);
  return *node;
}

// Applies `args` to the base config and returns it; fails the test on error.
ConfigNode With(const std::vector<std::string>& args) {
  ConfigNode root = Base();
  const absl::Status s = ApplyOverrides(args, &root);
  EXPECT_TRUE(s.ok()) << s;
  return root;
}

absl::Status ErrorOf(const std::vector<std::string>& args) {
  ConfigNode root = Base();
  return ApplyOverrides(args, &root);
}

TEST(OverridesTest, ParseForms) {
  auto set = ParseOverride("model.num_layers=2");
  ASSERT_TRUE(set.ok());
  EXPECT_EQ(set->op, Override::Op::kSet);
  EXPECT_EQ(set->key, "model.num_layers");
  EXPECT_EQ(set->value_text, "2");
  auto eq_in_value = ParseOverride("prompt.user=a=b");
  ASSERT_TRUE(eq_in_value.ok());
  EXPECT_EQ(eq_in_value->value_text, "a=b");  // split at the first '='
  auto del = ParseOverride("~tokenizer.max_seq_len");
  ASSERT_TRUE(del.ok());
  EXPECT_EQ(del->op, Override::Op::kDelete);
  EXPECT_EQ(del->key, "tokenizer.max_seq_len");
}

TEST(OverridesTest, BadSyntaxIsAClearError) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"num_layers", "no '=' in it"},
      {"=5", "the key is empty"},
      {"", "empty argument"},
      {"a..b=1", "empty segment"},
      {"a.=1", "ends with '.'"},
      {"a b=1", "contains whitespace"},
      {"--config=x", "looks like a flag"},
      {"~a=1", "takes no value"},
      {"~", "the key is empty"},
      {"~model._component_", "cannot be deleted on its own"},
      {"a[x]=1", "list index must be an integer"},
      {"${a}=1", "cannot contain interpolations"},
  };
  for (const auto& [arg, why] : cases) {
    auto parsed = ParseOverride(arg);
    ASSERT_FALSE(parsed.ok()) << arg;
    EXPECT_TRUE(absl::IsInvalidArgument(parsed.status()));
    EXPECT_THAT(Msg(parsed.status()), HasSubstr(absl::StrCat("'", arg, "'"))) << arg;
    EXPECT_THAT(Msg(parsed.status()), HasSubstr(why)) << arg;
    EXPECT_THAT(Msg(parsed.status()), HasSubstr("key=value")) << arg;  // says what is expected
  }
}

TEST(OverridesTest, ValuesAreTypedTheTorchtuneWay) {
  ConfigNode root = With({"i=3", "neg=-7", "f=0.25", "e=1e-4", "t=true", "T=True", "n=null",
                          "tilde=~", "empty=", "s=hello world", "qs='5'", "dq=\"true\"",
                          "list=[1, two, 3.0, null]", "map={a: 1, b: [x]}", "path=/tmp/x.bin",
                          "hexish=0x10", "ref=${output_dir}/logs", "hash=a #b: c",
                          "tagged=!!str 7"});
  EXPECT_EQ(root.Find("i")->kind(), Kind::kInt);
  EXPECT_EQ(*root.GetInt("i"), 3);
  EXPECT_EQ(*root.GetInt("neg"), -7);
  EXPECT_DOUBLE_EQ(*root.GetFloat("f"), 0.25);
  EXPECT_EQ(root.Find("e")->kind(), Kind::kFloat);
  EXPECT_EQ(*root.GetBool("t"), true);
  EXPECT_EQ(*root.GetBool("T"), true);
  EXPECT_TRUE(root.Find("n")->IsNull());
  EXPECT_TRUE(root.Find("tilde")->IsNull());
  EXPECT_TRUE(root.Find("empty")->IsNull());  // `key=` is null, as in torchtune
  EXPECT_EQ(*root.GetString("s"), "hello world");
  EXPECT_EQ(*root.GetString("qs"), "5");  // quoted stays a string
  EXPECT_EQ(*root.GetString("dq"), "true");
  const ConfigNode* list = root.Find("list");
  ASSERT_TRUE(list->IsList());
  ASSERT_EQ(list->size(), 4u);
  EXPECT_EQ(list->items()[0].kind(), Kind::kInt);
  EXPECT_EQ(list->items()[1].kind(), Kind::kString);
  EXPECT_EQ(list->items()[2].kind(), Kind::kFloat);
  EXPECT_EQ(list->items()[3].kind(), Kind::kNull);
  EXPECT_EQ(*root.GetInt("map.a"), 1);
  EXPECT_THAT(*root.GetList<std::string>("map.b"), ElementsAre("x"));
  EXPECT_EQ(*root.GetString("path"), "/tmp/x.bin");
  EXPECT_EQ(*root.GetInt("hexish"), 16);
  EXPECT_EQ(*root.GetString("ref"), "${output_dir}/logs");  // resolved later, not here
  EXPECT_EQ(*root.GetString("hash"), "a #b: c");  // unquoted values are taken whole
  EXPECT_EQ(*root.GetString("tagged"), "7");
}

TEST(OverridesTest, SetReplacesAndCreates) {
  ConfigNode root = With({"model.num_layers=2", "new_key=1", "a.b.c=deep", "seed=7"});
  EXPECT_EQ(*root.GetInt("model.num_layers"), 2);
  EXPECT_EQ(*root.GetInt("new_key"), 1);
  EXPECT_EQ(*root.GetString("a.b.c"), "deep");
  EXPECT_EQ(*root.GetInt("seed"), 7);
  // Replaced values keep their place and say where they came from.
  EXPECT_EQ(root.Keys()[5], "seed");
  const Location& loc = root.Find("model.num_layers")->location();
  EXPECT_EQ(loc.source, "command-line override 'model.num_layers=2'");
  EXPECT_EQ(root.Find("model.num_layers")->path(), "model.num_layers");
  EXPECT_EQ(root.Find("a.b.c")->path(), "a.b.c");
  // Untouched values keep their file and line.
  EXPECT_EQ(root.Find("tokenizer.path")->location().ToString(), "configs/gen.yaml:7");
}

TEST(OverridesTest, ListItemsAndNullParents) {
  ConfigNode root = With({"files[1]=c.bin", "files.0=z.bin", "quantizer._component_=q.x",
                          "quantizer.bits=4"});
  EXPECT_THAT(*root.GetList<std::string>("files"), ElementsAre("z.bin", "c.bin"));
  EXPECT_EQ(root.Find("quantizer")->ComponentName(), "q.x");
  EXPECT_EQ(*root.GetInt("quantizer.bits"), 4);
  EXPECT_THAT(Msg(ErrorOf({"files[5]=x"})), HasSubstr("'5' is not an index in it"));
}

TEST(OverridesTest, DeleteRemovesKeysAndListItems) {
  ConfigNode root = With({"~tokenizer.max_seq_len", "~seed", "~files[0]", "~prompt"});
  EXPECT_EQ(root.Find("tokenizer.max_seq_len"), nullptr);
  EXPECT_NE(root.Find("tokenizer.path"), nullptr);
  EXPECT_EQ(root.Find("seed"), nullptr);
  EXPECT_EQ(root.Find("prompt"), nullptr);
  EXPECT_THAT(*root.GetList<std::string>("files"), ElementsAre("b.bin"));
  EXPECT_EQ(root.Find("files[0]")->path(), "files[0]");
  // Deleting something absent is an error naming the key and what exists.
  const absl::Status s = ErrorOf({"~tokenizer.max_len"});
  EXPECT_THAT(Msg(s), HasSubstr("command-line override '~tokenizer.max_len': key "
                                "'tokenizer.max_len': cannot delete: no key"));
  EXPECT_THAT(Msg(s), HasSubstr("_component_, path, max_seq_len"));
  EXPECT_THAT(Msg(ErrorOf({"~nope.x"})), HasSubstr("no key 'nope'"));
  EXPECT_THAT(Msg(ErrorOf({"~seed.x"})), HasSubstr("'seed' is int 1 (configs/gen.yaml:11)"));
}

TEST(OverridesTest, ComponentShorthand) {
  ConfigNode root = With({"model=cctune.models.llama3_2.llama3_2_1b"});
  const ConfigNode* model = root.Find("model");
  ASSERT_TRUE(model->IsMap());
  EXPECT_EQ(model->ComponentName(), "cctune.models.llama3_2.llama3_2_1b");
  EXPECT_EQ(*model->GetInt("num_layers"), 6);  // other keys stay, as in torchtune
  EXPECT_EQ(model->Child("_component_")->location().source,
            "command-line override 'model=cctune.models.llama3_2.llama3_2_1b'");
  // Nested components work the same way; maps merge; null switches the component off.
  ConfigNode merged = With({"model={num_layers: 2, dim: 64}", "tokenizer=null"});
  EXPECT_EQ(*merged.GetInt("model.num_layers"), 2);
  EXPECT_EQ(*merged.GetInt("model.dim"), 64);
  EXPECT_EQ(merged.Find("model")->ComponentName(), "cctune.models.llama2c.stories");
  EXPECT_TRUE(merged.Find("tokenizer")->IsNull());
  // A non-component map is replaced by a scalar, like OmegaConf's merge does.
  ConfigNode replaced = With({"prompt=plain"});
  EXPECT_EQ(*replaced.GetString("prompt"), "plain");
  EXPECT_THAT(Msg(ErrorOf({"model=5"})),
              HasSubstr("'model' (configs/gen.yaml:2) is the component "
                        "'cctune.models.llama2c.stories'; set it to a component name, null or "
                        "a map, not int 5"));
}

TEST(OverridesTest, SettingBelowAScalarIsAnError) {
  const absl::Status s = ErrorOf({"seed.value=3"});
  EXPECT_THAT(Msg(s), HasSubstr("command-line override 'seed.value=3': key 'seed.value': 'seed' "
                                "is int 1 (configs/gen.yaml:11), not a map"));
}

TEST(OverridesTest, BadValuesAndAllErrorsReported) {
  EXPECT_THAT(Msg(ErrorOf({"files=[a, b"})),
              HasSubstr("key 'files': cannot parse the value '[a, b'"));
  EXPECT_THAT(Msg(ErrorOf({"n=99999999999999999999"})), HasSubstr("does not fit in 64 bits"));
  const absl::Status many = ErrorOf({"bad", "seed=2", "~missing", "x==1"});
  EXPECT_THAT(Msg(many), HasSubstr("2 bad overrides"));
  EXPECT_THAT(Msg(many), HasSubstr("'bad'"));
  EXPECT_THAT(Msg(many), HasSubstr("'~missing'"));
  // `x==1` is key x with value "=1": a legal string.
  ConfigNode root = With({"x==1"});
  EXPECT_EQ(*root.GetString("x"), "=1");
}

// Random scalars, written the way a user would type them, come back with the same type and
// value (the reference is the generating value, not the parser).
TEST(OverridesTest, RandomScalarValuesRoundTrip) {
  Generator gen(77);
  for (int trial = 0; trial < 500; ++trial) {
    ConfigNode root = Base();
    const uint64_t kind = gen.UniformInt(4);
    std::string text;
    if (kind == 0) {
      const int64_t v = static_cast<int64_t>(gen.NextUint64() >> (1 + gen.UniformInt(63)));
      text = absl::StrCat(gen.UniformInt(2) ? -v : v);
      ASSERT_TRUE(ApplyOverrides({"v=" + text}, &root).ok()) << text;
      EXPECT_EQ(*root.GetInt("v"), std::stoll(text)) << text;
    } else if (kind == 1) {
      const double v = (gen.UniformDouble() - 0.5) * std::pow(10.0, gen.UniformInt(12) - 6.0);
      text = absl::StrCat(v);
      if (text.find_first_of(".e") == std::string::npos) text += ".0";
      ASSERT_TRUE(ApplyOverrides({"v=" + text}, &root).ok()) << text;
      EXPECT_EQ(root.Find("v")->kind(), Kind::kFloat) << text;
      EXPECT_DOUBLE_EQ(*root.GetFloat("v"), std::stod(text)) << text;
    } else if (kind == 2) {
      const bool v = gen.UniformInt(2) == 1;
      const char* spellings[2][3] = {{"false", "False", "FALSE"}, {"true", "True", "TRUE"}};
      text = spellings[v][gen.UniformInt(3)];
      ASSERT_TRUE(ApplyOverrides({"v=" + text}, &root).ok()) << text;
      EXPECT_EQ(*root.GetBool("v"), v) << text;
    } else {
      // A number in quotes stays a string.
      text = absl::StrCat(gen.UniformInt(100000));
      ASSERT_TRUE(ApplyOverrides({"v='" + text + "'"}, &root).ok()) << text;
      EXPECT_EQ(*root.GetString("v"), text);
    }
  }
}

TEST(OverridesTest, HundredThousandOverridesOnHundredThousandKeysApply) {
  constexpr int kKeys = 100000;
  std::string yaml;
  for (int i = 0; i < kKeys; ++i) absl::StrAppend(&yaml, "k", i, ": ", i, "\n");
  ConfigNode root = *LoadYamlString(yaml, "big.yaml");
  std::vector<std::string> args;
  for (int i = 0; i < kKeys; ++i) args.push_back(absl::StrCat("k", i, "=", i + 1));
  for (int i = 0; i < kKeys; ++i) args.push_back(absl::StrCat("new.n", i, "=x", i));
  ASSERT_TRUE(ApplyOverrides(args, &root).ok());
  EXPECT_EQ(root.Find("k99999")->int_value(), 100000);
  EXPECT_EQ(root.Find("new.n5")->string_value(), "x5");
  EXPECT_EQ(root.Find("new.n5")->path(), "new.n5");
  // A bad override among many is reported with its own text.
  args.push_back("~missing");
  const absl::Status s = ApplyOverrides(args, &root);
  EXPECT_THAT(Msg(s), HasSubstr("cannot delete: no key 'missing'"));
}

TEST(OverridesTest, KeysNestedDeeperThanTheLimitAreAnError) {
  for (int depth : {kMaxConfigDepth + 1, 100000}) {
    std::string key = "a";
    for (int i = 1; i < depth; ++i) key += ".a";
    ConfigNode root = *LoadYamlString(kBase, "base.yaml");
    const absl::Status s = ApplyOverrides({key + "=1"}, &root);
    ASSERT_FALSE(s.ok()) << depth;
    EXPECT_THAT(Msg(s), HasSubstr(absl::StrCat(kMaxConfigDepth))) << depth;
  }
  // Nesting below an existing deep value counts too.
  ConfigNode root = *LoadYamlString(
      "a: " + std::string(kMaxConfigDepth - 2, '[') + std::string(kMaxConfigDepth - 2, ']') +
      "\n", "base.yaml");
  std::string key = "a";
  for (int i = 0; i < kMaxConfigDepth - 3; ++i) key += "[0]";
  EXPECT_FALSE(ApplyOverrides({key + "=[[[1]]]"}, &root).ok());
}

TEST(OverridesTest, HugeAndOddValuesAreTypedNotCrashed) {
  ConfigNode root = *LoadYamlString(kBase, "base.yaml");
  const std::string huge(1 << 20, 'x');
  ASSERT_TRUE(ApplyOverrides({"s=" + huge}, &root).ok());
  EXPECT_EQ(root.Find("s")->string_value().size(), huge.size());
  EXPECT_FALSE(ApplyOverrides({"n=99999999999999999999999"}, &root).ok());
  EXPECT_FALSE(ApplyOverrides({"v=" + std::string(100000, '[')}, &root).ok());
  EXPECT_FALSE(ApplyOverrides({"v=[&a [*a]]"}, &root).ok());
  ASSERT_TRUE(ApplyOverrides({"e=", "u=\xff\xfe"}, &root).ok());
  EXPECT_TRUE(root.Find("e")->IsNull());
}

}  // namespace
}  // namespace cctune
