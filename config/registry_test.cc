#include "config/registry.h"

#include <memory>
#include <string>
#include <vector>

#include "config/config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cctune {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

std::string Msg(const absl::Status& s) { return std::string(s.message()); }

// Stand-ins for what models/ and tokenizers/ will build.
struct FakeModel {
  std::string builder;
  int64_t num_layers = 0;
  int64_t dim = 0;
  std::string norm;
};
struct FakeTokenizer {
  std::string path;
  std::optional<int64_t> max_seq_len;
};
struct FakeDataset {
  std::unique_ptr<FakeTokenizer> tokenizer;
  int64_t rows = 0;
};

using ModelRegistry = Registry<std::unique_ptr<FakeModel>>;
using TokenizerRegistry = Registry<std::unique_ptr<FakeTokenizer>>;
// A factory with an extra argument from the recipe (as torchtune's instantiate(cfg, *args)).
using DatasetRegistry = Registry<FakeDataset, const TokenizerRegistry&>;

Schema ModelSchema() {
  return Schema("", "a fake model")
      .Default("num_layers", KeyType::Int(), ConfigNode::Int(4), "decoder layers")
      .Required("dim", KeyType::Int(), "embedding width")
      .Default("norm", KeyType::Enum({"rms", "layer"}), ConfigNode::String("rms"), "norm type");
}

absl::StatusOr<std::unique_ptr<FakeModel>> BuildModel(const ConfigNode& node) {
  auto m = std::make_unique<FakeModel>();
  m->builder = node.ComponentName();
  CCTUNE_ASSIGN_OR_RETURN(m->num_layers, node.GetInt("num_layers"));
  CCTUNE_ASSIGN_OR_RETURN(m->dim, node.GetInt("dim"));
  CCTUNE_ASSIGN_OR_RETURN(m->norm, node.GetString("norm"));
  if (m->dim % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("dim (", m->dim, ") must be even"));
  }
  return m;
}

class RegistryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(models_.Register("cctune.models.llama3_2.llama3_2_1b", ModelSchema(), BuildModel)
                    .ok());
    ASSERT_TRUE(tokenizers_
                    .Register("cctune.models.llama3.llama3_tokenizer",
                              Schema()
                                  .Required("path", KeyType::String(), "tokenizer.model")
                                  .Optional("max_seq_len", KeyType::Int().OrNull(), "truncate"),
                              [](const ConfigNode& node)
                                  -> absl::StatusOr<std::unique_ptr<FakeTokenizer>> {
                                auto t = std::make_unique<FakeTokenizer>();
                                CCTUNE_ASSIGN_OR_RETURN(t->path, node.GetString("path"));
                                CCTUNE_ASSIGN_OR_RETURN(t->max_seq_len,
                                                        node.GetOptionalInt("max_seq_len"));
                                return t;
                              })
                    .ok());
    ASSERT_TRUE(
        datasets_
            .Register("cctune.datasets.toy",
                      Schema()
                          .Required("tokenizer", KeyType::Component("tokenizer"), "its tokenizer")
                          .Default("rows", KeyType::Int(), ConfigNode::Int(10), "rows"),
                      [](const ConfigNode& node,
                         const TokenizerRegistry& tokenizers) -> absl::StatusOr<FakeDataset> {
                        FakeDataset d;
                        CCTUNE_ASSIGN_OR_RETURN(d.tokenizer,
                                                tokenizers.InstantiateKey(node, "tokenizer"));
                        CCTUNE_ASSIGN_OR_RETURN(d.rows, node.GetInt("rows"));
                        return d;
                      })
            .ok());
  }

  ConfigNode Node(const std::string& yaml, const std::string& key) {
    auto cfg = Config::FromString(yaml, "r.yaml");
    CCTUNE_CHECK_OK(cfg);
    CCTUNE_CHECK_OK(cfg->Resolve());
    return **cfg->Get(key);
  }

  ComponentCatalog catalog_;
  ModelRegistry models_{"model", &catalog_};
  TokenizerRegistry tokenizers_{"tokenizer", &catalog_};
  DatasetRegistry datasets_{"dataset", &catalog_};
};

TEST_F(RegistryTest, InstantiateReadsKeysAndFillsDefaults) {
  auto m = models_.Instantiate(
      Node("model:\n  _component_: cctune.models.llama3_2.llama3_2_1b\n  dim: 64\n", "model"));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->builder, "cctune.models.llama3_2.llama3_2_1b");
  EXPECT_EQ((*m)->dim, 64);
  EXPECT_EQ((*m)->num_layers, 4);  // default
  EXPECT_EQ((*m)->norm, "rms");    // default
}

TEST_F(RegistryTest, TorchtuneSpellingBuildsTheSameComponent) {
  auto m = models_.Instantiate(Node(
      "model:\n  _component_: torchtune.models.llama3_2.llama3_2_1b\n  dim: 8\n  num_layers: 2\n",
      "model"));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->dim, 8);
  EXPECT_EQ((*m)->num_layers, 2);
  EXPECT_TRUE(models_.Contains("torchtune.models.llama3_2.llama3_2_1b"));
  EXPECT_TRUE(models_.Contains("cctune.models.llama3_2.llama3_2_1b"));
  EXPECT_FALSE(tokenizers_.Contains("torchtune.models.llama3_2.llama3_2_1b"));  // other kind
  EXPECT_THAT(models_.Names(), ElementsAre("cctune.models.llama3_2.llama3_2_1b"));
}

TEST_F(RegistryTest, ExplicitAliases) {
  ASSERT_TRUE(models_.AddAlias("torchtune.models.llama3_2_1b", "cctune.models.llama3_2.llama3_2_1b")
                  .ok());
  auto m = models_.Instantiate(
      Node("model: {_component_: torchtune.models.llama3_2_1b, dim: 2}\n", "model"));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->builder, "torchtune.models.llama3_2_1b");  // the node as written
  // An alias must name a component of the registry's own kind.
  EXPECT_TRUE(absl::IsNotFound(
      tokenizers_.AddAlias("x", "cctune.models.llama3_2.llama3_2_1b")));
}

TEST_F(RegistryTest, UnknownKeyListsTheAcceptedKeys) {
  auto m = models_.Instantiate(Node(
      "model:\n  _component_: cctune.models.llama3_2.llama3_2_1b\n  dim: 8\n  num_layer: 2\n",
      "model"));
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(m.status()));
  EXPECT_EQ(Msg(m.status()),
            "r.yaml:4: key 'model.num_layer': unknown key 'num_layer'; did you mean "
            "'num_layers'?; keys accepted by cctune.models.llama3_2.llama3_2_1b: num_layers, "
            "dim, norm");
}

TEST_F(RegistryTest, WrongTypeAndMissingRequiredKeyNameFileLineAndKey) {
  auto wrong = models_.Instantiate(Node(
      "x: 1\nmodel:\n  _component_: cctune.models.llama3_2.llama3_2_1b\n  dim: wide\n", "model"));
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(Msg(wrong.status()),
            "r.yaml:4: key 'model.dim': expected int, got string 'wide'");
  auto missing = models_.Instantiate(
      Node("x: 1\nmodel:\n  _component_: cctune.models.llama3_2.llama3_2_1b\n", "model"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(Msg(missing.status()),
            "r.yaml:2: key 'model.dim': missing required key (int: embedding width) of "
            "cctune.models.llama3_2.llama3_2_1b");
  // Several problems come back together.
  auto both = models_.Instantiate(Node(
      "model:\n  _component_: cctune.models.llama3_2.llama3_2_1b\n  norm: batch\n  extra: 1\n",
      "model"));
  ASSERT_FALSE(both.ok());
  EXPECT_THAT(Msg(both.status()), HasSubstr("3 problems"));
  EXPECT_THAT(Msg(both.status()), HasSubstr("r.yaml:3: key 'model.norm': expected one of rms|layer"));
  EXPECT_THAT(Msg(both.status()), HasSubstr("r.yaml:4: key 'model.extra': unknown key"));
  EXPECT_THAT(Msg(both.status()), HasSubstr("key 'model.dim': missing required key"));
}

TEST_F(RegistryTest, UnknownAndWrongKindComponents) {
  auto unknown = models_.Instantiate(
      Node("model: {_component_: cctune.models.llama3_2.llama3_2_1bx, dim: 2}\n", "model"));
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(Msg(unknown.status()),
              StartsWith("r.yaml:1: key 'model._component_': unknown component "
                         "'cctune.models.llama3_2.llama3_2_1bx'; did you mean "
                         "'cctune.models.llama3_2.llama3_2_1b'?"));
  auto wrong_kind = models_.Instantiate(
      Node("model: {_component_: cctune.models.llama3.llama3_tokenizer, path: x}\n", "model"));
  ASSERT_FALSE(wrong_kind.ok());
  EXPECT_THAT(Msg(wrong_kind.status()),
              HasSubstr("'cctune.models.llama3.llama3_tokenizer' is a tokenizer component, but "
                        "a model component is expected here"));
  auto no_name = models_.Instantiate(Node("model: {dim: 2}\n", "model"));
  ASSERT_FALSE(no_name.ok());
  EXPECT_THAT(Msg(no_name.status()), HasSubstr("missing _component_"));
  auto missing_key = models_.InstantiateKey(Node("a: {b: 1}\n", "a"), "model");
  ASSERT_FALSE(missing_key.ok());
  EXPECT_THAT(Msg(missing_key.status()), HasSubstr("key 'a.model': missing"));
}

TEST_F(RegistryTest, FactoryErrorsGetTheComponentContext) {
  auto odd = models_.Instantiate(
      Node("model: {_component_: cctune.models.llama3_2.llama3_2_1b, dim: 7}\n", "model"));
  ASSERT_FALSE(odd.ok());
  EXPECT_EQ(Msg(odd.status()),
            "r.yaml:1: key 'model': building model 'cctune.models.llama3_2.llama3_2_1b': dim "
            "(7) must be even");
}

TEST_F(RegistryTest, NestedComponentsAndExtraArguments) {
  const ConfigNode node = Node(
      "path_root: /tok\n"
      "dataset:\n"
      "  _component_: torchtune.datasets.toy\n"
      "  tokenizer:\n"
      "    _component_: torchtune.models.llama3.llama3_tokenizer\n"
      "    path: ${path_root}/tokenizer.model\n",
      "dataset");
  auto d = datasets_.Instantiate(node, tokenizers_);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->rows, 10);
  ASSERT_NE(d->tokenizer, nullptr);
  EXPECT_EQ(d->tokenizer->path, "/tok/tokenizer.model");
  EXPECT_EQ(d->tokenizer->max_seq_len, std::nullopt);
  // The outer check already covers the nested node: a bad nested key fails before building.
  const ConfigNode bad = Node(
      "dataset:\n"
      "  _component_: cctune.datasets.toy\n"
      "  tokenizer:\n"
      "    _component_: cctune.models.llama3.llama3_tokenizer\n"
      "    pth: /x\n",
      "dataset");
  auto e = datasets_.Instantiate(bad, tokenizers_);
  ASSERT_FALSE(e.ok());
  EXPECT_THAT(Msg(e.status()), HasSubstr("r.yaml:5: key 'dataset.tokenizer.pth': unknown key"));
  EXPECT_THAT(Msg(e.status()), HasSubstr("r.yaml:3: key 'dataset.tokenizer.path': missing"));
}

TEST_F(RegistryTest, RegistrationErrors) {
  EXPECT_TRUE(absl::IsAlreadyExists(
      models_.Register("cctune.models.llama3_2.llama3_2_1b", ModelSchema(), BuildModel)));
  EXPECT_TRUE(absl::IsAlreadyExists(
      tokenizers_.Register("cctune.models.llama3_2.llama3_2_1b", Schema(),
                           [](const ConfigNode&) -> absl::StatusOr<std::unique_ptr<FakeTokenizer>> {
                             return nullptr;
                           })));
  EXPECT_FALSE(models_.Register("cctune.models.empty", Schema(), nullptr).ok());
  Schema bad;
  bad.Default("n", KeyType::Int(), ConfigNode::String("x"), "");
  EXPECT_THAT(Msg(models_.Register("cctune.models.bad", bad, BuildModel)),
              HasSubstr("default of key 'n': expected int"));
  EXPECT_FALSE(models_.Contains("cctune.models.bad"));
}

// The pattern registry.h recommends: a Register function made idempotent by a local static,
// on registries that are themselves function-local statics over the global catalog.
ModelRegistry& GlobalModels() {
  static ModelRegistry* const r = new ModelRegistry("test_model");
  return *r;
}

int registration_runs = 0;

absl::Status RegisterTestModels() {
  static const absl::Status status = [] {
    ++registration_runs;
    return GlobalModels().Register("cctune.test.registry_test_model", ModelSchema(), BuildModel);
  }();
  return status;
}

TEST(RegistryGlobalTest, RegisterFunctionsAreIdempotent) {
  ASSERT_TRUE(RegisterTestModels().ok());
  ASSERT_TRUE(RegisterTestModels().ok());
  EXPECT_EQ(registration_runs, 1);
  EXPECT_TRUE(ComponentCatalog::Global().Find("torchtune.test.registry_test_model").has_value());
  auto cfg = Config::FromString("m: {_component_: torchtune.test.registry_test_model, dim: 4}\n");
  ASSERT_TRUE(cfg.ok());
  auto m = GlobalModels().InstantiateKey(cfg->root(), "m");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->dim, 4);
  // Validate() sees it through the global catalog.
  const Schema recipe = Schema("recipe").Required("m", KeyType::Component("test_model"), "");
  EXPECT_TRUE(Validate(*cfg, recipe).empty());
}

}  // namespace
}  // namespace cctune
