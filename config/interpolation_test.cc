#include "config/interpolation.h"

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
using ::testing::IsEmpty;
using Kind = ConfigNode::Kind;

ConfigNode Load(const std::string& yaml) {
  auto node = LoadYamlString(yaml, "i.yaml");
  CCTUNE_CHECK_OK(node);
  return *node;
}

// Resolves `yaml`; expects success.
ConfigNode Resolved(const std::string& yaml) {
  ConfigNode root = Load(yaml);
  std::vector<ConfigError> errors = ResolveInterpolations(&root);
  for (const ConfigError& e : errors) ADD_FAILURE() << e.ToString();
  return root;
}

// Resolves `yaml`; returns the error messages.
std::vector<std::string> Errors(const std::string& yaml) {
  ConfigNode root = Load(yaml);
  std::vector<std::string> out;
  for (const ConfigError& e : ResolveInterpolations(&root)) out.push_back(e.ToString());
  return out;
}

TEST(InterpolationTest, WholeValueKeepsTheReferencedType) {
  ConfigNode root = Resolved(
      "n: 8\n"
      "f: 0.5\n"
      "b: false\n"
      "z: null\n"
      "s: text\n"
      "m: {x: 1, y: [2, 3]}\n"
      "copy_n: ${n}\n"
      "copy_f: ${f}\n"
      "copy_b: ${b}\n"
      "copy_z: ${z}\n"
      "copy_s: ${s}\n"
      "copy_m: ${m}\n"
      "spaced: ${ n }\n");
  EXPECT_EQ(root.Find("copy_n")->kind(), Kind::kInt);
  EXPECT_EQ(*root.GetInt("copy_n"), 8);
  EXPECT_DOUBLE_EQ(*root.GetFloat("copy_f"), 0.5);
  EXPECT_EQ(*root.GetBool("copy_b"), false);
  EXPECT_TRUE(root.Find("copy_z")->IsNull());
  EXPECT_EQ(*root.GetString("copy_s"), "text");
  EXPECT_EQ(*root.GetInt("copy_m.x"), 1);
  EXPECT_THAT(*root.GetList<int64_t>("copy_m.y"), ElementsAre(2, 3));
  EXPECT_EQ(root.Find("copy_m.y[1]")->path(), "copy_m.y[1]");
  EXPECT_EQ(*root.GetInt("spaced"), 8);
  // The copy is located where the ${} was written.
  EXPECT_EQ(root.Find("copy_n")->location().line, 7);
}

TEST(InterpolationTest, InsideStringsAndNestedKeys) {
  ConfigNode root = Resolved(
      "output_dir: /tmp/run\n"
      "checkpointer:\n"
      "  dir: /ckpt\n"
      "  files: [a.bin, b.bin]\n"
      "logs: ${output_dir}/logs\n"
      "tok: ${checkpointer.dir}/tok.model\n"
      "first: file=${checkpointer.files[0]} second=${checkpointer.files.1}\n"
      "num: layers_${n}_lr_${lr}_${flag}\n"
      "n: 4\n"
      "lr: 2e-5\n"
      "flag: true\n"
      "quoted: \"${output_dir}\"\n"
      "escaped: \\${output_dir} costs $5\n");
  EXPECT_EQ(*root.GetString("logs"), "/tmp/run/logs");
  EXPECT_EQ(*root.GetString("tok"), "/ckpt/tok.model");
  EXPECT_EQ(*root.GetString("first"), "file=a.bin second=b.bin");
  EXPECT_EQ(*root.GetString("num"), "layers_4_lr_2e-5_true");  // numbers keep their spelling
  EXPECT_EQ(*root.GetString("quoted"), "/tmp/run");
  EXPECT_EQ(*root.GetString("escaped"), "${output_dir} costs $5");
}

TEST(InterpolationTest, ChainsResolveInAnyOrder) {
  // c refers forward to b, which refers to a; e goes through a map copied by interpolation.
  ConfigNode root = Resolved(
      "c: ${b}/c\n"
      "b: ${a}/b\n"
      "a: /root\n"
      "e: ${d.inner.v}\n"
      "d: ${src}\n"
      "src: {inner: {v: '${a}'}}\n");  // inside {} or [] a ${} must be quoted
  EXPECT_EQ(*root.GetString("c"), "/root/b/c");
  EXPECT_EQ(*root.GetString("b"), "/root/b");
  EXPECT_EQ(*root.GetString("e"), "/root");
  EXPECT_EQ(*root.GetString("d.inner.v"), "/root");
}

TEST(InterpolationTest, RelativeReferences) {
  ConfigNode root = Resolved(
      "top: 1\n"
      "model:\n"
      "  dim: 64\n"
      "  head_dim: ${.dim}\n"
      "  up: ${..top}\n"
      "  nested:\n"
      "    again: ${..dim}\n");
  EXPECT_EQ(*root.GetInt("model.head_dim"), 64);
  EXPECT_EQ(*root.GetInt("model.up"), 1);
  EXPECT_EQ(*root.GetInt("model.nested.again"), 64);
  EXPECT_THAT(Errors("a: ${..x}\n"), ElementsAre(HasSubstr("goes above the top")));
}

TEST(InterpolationTest, CyclesNameTheWholeChain) {
  EXPECT_THAT(Errors("a: ${b}\nb: ${a}\n"),
              ElementsAre("i.yaml:2: key 'b': interpolation cycle: ${a} -> ${b} -> ${a}"));
  EXPECT_THAT(Errors("x: 1\nself: ${self}\n"),
              ElementsAre("i.yaml:2: key 'self': interpolation cycle: ${self} -> ${self}"));
  EXPECT_THAT(Errors("a: pre_${b}\nb: ${c}\nc: ${a}_post\n"),
              ElementsAre(HasSubstr("interpolation cycle: ${a} -> ${b} -> ${c} -> ${a}")));
  // A map that contains a reference to itself.
  EXPECT_THAT(Errors("m:\n  k: ${m}\n"),
              ElementsAre("i.yaml:2: key 'm.k': interpolation cycle: ${m.k} -> ${m} -> ${m.k}"));
}

TEST(InterpolationTest, ACycleIsReportedOnceAndOthersStillResolve) {
  ConfigNode root = Load("a: ${b}\nb: ${a}\nuses_a: ${a}/x\nfine: ${ok}\nok: 3\n");
  std::vector<std::string> failed;
  std::vector<ConfigError> errors = ResolveInterpolations(&root, &failed);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_THAT(failed, ElementsAre("a", "b", "uses_a"));
  EXPECT_EQ(*root.GetInt("fine"), 3);
  EXPECT_EQ(*root.GetString("uses_a"), "${a}/x");  // failed nodes keep their text
}

TEST(InterpolationTest, MissingKeysNameTheReferencingKeyAndLine) {
  EXPECT_THAT(
      Errors("output_dir: /tmp\nlogger:\n  log_dir: ${outptu_dir}/logs\n"),
      ElementsAre("i.yaml:3: key 'logger.log_dir': interpolation ${outptu_dir} refers to "
                  "missing key 'outptu_dir' (the config has keys: output_dir, logger)"));
  EXPECT_THAT(Errors("m: {a: 1}\nx: ${m.b}\n"),
              ElementsAre(HasSubstr("i.yaml:2: key 'x': interpolation ${m.b} refers to missing "
                                    "key 'm.b' ('m' has keys: a)")));
  EXPECT_THAT(Errors("n: 3\nx: ${n.deeper}\n"),
              ElementsAre(HasSubstr("'n' is int 3")));
  EXPECT_THAT(Errors("l: [1]\nx: ${l[4]}\n"),
              ElementsAre(HasSubstr("refers to missing key 'l.4'")));
  // Every missing reference is reported, not only the first.
  EXPECT_EQ(Errors("a: ${x}\nb: ${y}\nc: ${z}\n").size(), 3u);
}

TEST(InterpolationTest, MalformedAndUnsupportedSyntax) {
  EXPECT_THAT(Errors("a: ${b\n"), ElementsAre(HasSubstr("unterminated '${'")));
  EXPECT_THAT(Errors("a: ${}\n"), ElementsAre(HasSubstr("empty interpolation")));
  EXPECT_THAT(Errors("a: ${oc.env:HOME}\n"),
              ElementsAre(HasSubstr("resolver interpolations such as '${oc.env:HOME}' are not "
                                    "supported")));
  EXPECT_THAT(Errors("b: c\na: ${x.${b}}\n"), ElementsAre(HasSubstr("nested interpolations")));
  EXPECT_THAT(Errors("a: ${b..c}\n"), ElementsAre(HasSubstr("malformed key")));
}

TEST(InterpolationTest, OnlyScalarsCanBeEmbeddedInStrings) {
  EXPECT_THAT(Errors("m: {a: 1}\ns: x_${m}\n"),
              ElementsAre(HasSubstr("i.yaml:2: key 's': interpolation ${m} inside a string "
                                    "refers to map with keys {a} at i.yaml:1")));
  EXPECT_THAT(Errors("z: null\ns: x_${z}\n"), ElementsAre(HasSubstr("refers to null")));
}

TEST(InterpolationTest, ListsAndPlainValuesAreUntouched) {
  ConfigNode root = Resolved("files: ['${a}', '${a}.bak', plain]\na: f\nk: no refs here\n");
  EXPECT_THAT(*root.GetList<std::string>("files"), ElementsAre("f", "f.bak", "plain"));
  EXPECT_EQ(*root.GetString("k"), "no refs here");
}

// Random chains: key k_i refers to k_{i-1} inside a string; the reference result is built by
// direct concatenation in the test.
TEST(InterpolationTest, RandomChainsMatchDirectConcatenation) {
  Generator gen(2024);
  for (int trial = 0; trial < 50; ++trial) {
    const int n = 2 + static_cast<int>(gen.UniformInt(12));
    std::vector<std::string> expected(n);
    std::vector<std::string> lines(n);
    expected[0] = absl::StrCat("root", gen.UniformInt(1000));
    lines[0] = absl::StrCat("k0: ", expected[0]);
    for (int i = 1; i < n; ++i) {
      const std::string suffix = absl::StrCat("_", gen.UniformInt(100));
      // Whole-value copies every few links, string embedding otherwise.
      if (gen.UniformInt(3) == 0) {
        expected[i] = expected[i - 1];
        lines[i] = absl::StrCat("k", i, ": ${k", i - 1, "}");
      } else {
        expected[i] = expected[i - 1] + suffix;
        lines[i] = absl::StrCat("k", i, ": ${k", i - 1, "}", suffix);
      }
    }
    // Shuffle the line order: resolution must not depend on it.
    for (int i = n - 1; i > 0; --i) std::swap(lines[i], lines[gen.UniformInt(i + 1)]);
    std::string yaml;
    for (const std::string& l : lines) absl::StrAppend(&yaml, l, "\n");
    ConfigNode root = Resolved(yaml);
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(*root.GetString(absl::StrCat("k", i)), expected[i]) << yaml;
    }
  }
}

TEST(InterpolationTest, HasInterpolation) {
  EXPECT_TRUE(HasInterpolation("${a}"));
  EXPECT_TRUE(HasInterpolation("x/${a}/y"));
  EXPECT_FALSE(HasInterpolation("$a {b}"));
  EXPECT_THAT(Errors("a: 1\n"), IsEmpty());
}

TEST(InterpolationTest, LongReferenceChainIsAnErrorNotACrash) {
  for (int n : {kMaxInterpolationDepth + 1, 5000, 50000}) {
    std::string yaml;
    for (int i = 0; i < n; ++i) absl::StrAppend(&yaml, "k", i, ": ${k", i + 1, "}\n");
    absl::StrAppend(&yaml, "k", n, ": end\n");
    const std::vector<std::string> errors = Errors(yaml);
    ASSERT_FALSE(errors.empty()) << n;
    EXPECT_THAT(errors[0], HasSubstr("i.yaml:")) << n;
    EXPECT_THAT(errors[0], HasSubstr(absl::StrCat(kMaxInterpolationDepth))) << n;
  }
  // A chain within the limit resolves.
  std::string yaml;
  const int n = kMaxInterpolationDepth - 1;
  for (int i = 0; i < n; ++i) absl::StrAppend(&yaml, "k", i, ": ${k", i + 1, "}\n");
  absl::StrAppend(&yaml, "k", n, ": end\n");
  EXPECT_EQ(*Resolved(yaml).GetString("k0"), "end");
}

TEST(InterpolationTest, ValuesCopiedDeeperThanTheDepthLimitAreAnError) {
  // Each level copies the one before ten lists deeper: 400 levels without a limit.
  std::string yaml = "l0: [[[[[[[[[[1]]]]]]]]]]\n";
  for (int i = 1; i < 40; ++i) {
    absl::StrAppend(&yaml, "l", i, ": [[[[[[[[[['${l", i - 1, "}']]]]]]]]]]\n");
  }
  const std::vector<std::string> errors = Errors(yaml);
  ASSERT_FALSE(errors.empty());
  EXPECT_THAT(errors[0], HasSubstr(absl::StrCat(kMaxConfigDepth)));
}

TEST(InterpolationTest, HundredThousandReferencesResolve) {
  constexpr int kKeys = 100000;
  std::string yaml = "base: /data\nsection:\n";
  for (int i = 0; i < kKeys; ++i) absl::StrAppend(&yaml, "  k", i, ": ${base}/", i, "\n");
  for (int i = 0; i < kKeys; ++i) absl::StrAppend(&yaml, "r", i, ": ${section.k", i, "}\n");
  ConfigNode root = Resolved(yaml);
  EXPECT_EQ(*root.GetString("r99999"), "/data/99999");
  EXPECT_EQ(*root.GetString("section.k7"), "/data/7");
}

TEST(InterpolationTest, ReferencesThatMultiplyTheConfigHitASizeLimit) {
  // Strings: each level doubles, 2^40 bytes without a limit.
  std::string yaml = "s0: ab\n";
  for (int i = 1; i <= 40; ++i) {
    absl::StrAppend(&yaml, "s", i, ": ${s", i - 1, "}${s", i - 1, "}\n");
  }
  std::vector<std::string> errors = Errors(yaml);
  ASSERT_FALSE(errors.empty());
  EXPECT_THAT(errors[0], HasSubstr(absl::StrCat(kMaxInterpolatedStringBytes, " bytes")));
  // Values: each level copies the one before ten times, 10^9 values without a limit.
  yaml = "l0: [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 10; ++i) {
    absl::StrAppend(&yaml, "l", i, ": [");
    for (int j = 0; j < 10; ++j) absl::StrAppend(&yaml, j ? ", " : "", "'${l", i - 1, "}'");
    absl::StrAppend(&yaml, "]\n");
  }
  errors = Errors(yaml);
  ASSERT_FALSE(errors.empty());
  EXPECT_THAT(errors[0], HasSubstr(absl::StrCat(kMaxConfigValues, " values")));
}

}  // namespace
}  // namespace cctune
