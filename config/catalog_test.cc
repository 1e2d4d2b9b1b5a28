#include "config/catalog.h"

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cctune {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

std::string Msg(const absl::Status& s) { return std::string(s.message()); }

Schema Tiny() { return Schema().Required("dim", KeyType::Int(), "width"); }

TEST(CatalogTest, TorchtuneSpellingResolvesToTheCctuneEntry) {
  ComponentCatalog catalog;
  ASSERT_TRUE(catalog.Add("cctune.models.llama3_2.llama3_2_1b", "model", Tiny()).ok());
  auto direct = catalog.Find("cctune.models.llama3_2.llama3_2_1b");
  auto torchtune = catalog.Find("torchtune.models.llama3_2.llama3_2_1b");
  ASSERT_TRUE(direct.has_value());
  ASSERT_TRUE(torchtune.has_value());
  EXPECT_EQ(torchtune->name, "cctune.models.llama3_2.llama3_2_1b");
  EXPECT_EQ(torchtune->kind, "model");
  EXPECT_EQ(torchtune->schema.get(), direct->schema.get());  // the same entry
  EXPECT_EQ(direct->schema->name(), "cctune.models.llama3_2.llama3_2_1b");  // named if unnamed
  EXPECT_FALSE(catalog.Find("other.models.llama3_2.llama3_2_1b").has_value());
  EXPECT_EQ(TorchtuneToCctune("torchtune.a.b"), "cctune.a.b");
  EXPECT_EQ(TorchtuneToCctune("torchtunex.a"), "torchtunex.a");
  EXPECT_EQ(TorchtuneToCctune("cctune.a"), "cctune.a");
}

TEST(CatalogTest, ExplicitAliases) {
  ComponentCatalog catalog;
  ASSERT_TRUE(catalog.Add("cctune.checkpoint.FullModelHFCheckpointer", "checkpointer", Tiny()).ok());
  ASSERT_TRUE(catalog
                  .AddAlias("torchtune.training.FullModelHFCheckpointer",
                            "cctune.checkpoint.FullModelHFCheckpointer")
                  .ok());
  ASSERT_TRUE(catalog.AddAlias("hf_checkpointer", "cctune.checkpoint.FullModelHFCheckpointer").ok());
  EXPECT_EQ(catalog.Find("torchtune.training.FullModelHFCheckpointer")->name,
            "cctune.checkpoint.FullModelHFCheckpointer");
  EXPECT_EQ(catalog.Find("hf_checkpointer")->kind, "checkpointer");
  EXPECT_TRUE(absl::IsNotFound(catalog.AddAlias("x", "cctune.nothing")));
  EXPECT_TRUE(absl::IsAlreadyExists(catalog.AddAlias("hf_checkpointer",
                                                     "cctune.checkpoint.FullModelHFCheckpointer")));
  // Aliases appear in suggestions but not in Names().
  EXPECT_THAT(catalog.Names(), ElementsAre("cctune.checkpoint.FullModelHFCheckpointer"));
}

TEST(CatalogTest, RegistrationErrors) {
  ComponentCatalog catalog;
  ASSERT_TRUE(catalog.Add("cctune.a", "model", Tiny()).ok());
  const absl::Status dup = catalog.Add("cctune.a", "tokenizer", Tiny());
  EXPECT_TRUE(absl::IsAlreadyExists(dup));
  EXPECT_THAT(Msg(dup), HasSubstr("'cctune.a' is already registered (model)"));
  EXPECT_THAT(Msg(catalog.Add("torchtune.b", "model", Tiny())),
              HasSubstr("register 'torchtune.b' as 'cctune.b'"));
  EXPECT_FALSE(catalog.Add("", "model", Tiny()).ok());
  EXPECT_FALSE(catalog.Add("cctune.c", "", Tiny()).ok());
  Schema bad = Tiny();
  bad.Required("dim", KeyType::Int(), "again");
  EXPECT_THAT(Msg(catalog.Add("cctune.d", "model", bad)),
              HasSubstr("component 'cctune.d': schema 'cctune.d' is malformed"));
}

TEST(CatalogTest, UnknownNamesSuggestNearOnesAndListTheKind) {
  ComponentCatalog catalog;
  for (const char* name : {"cctune.models.llama3_2.llama3_2_1b", "cctune.models.llama3_2.llama3_2_3b",
                           "cctune.models.llama2.llama2_7b"}) {
    ASSERT_TRUE(catalog.Add(name, "model", Tiny()).ok());
  }
  ASSERT_TRUE(catalog.Add("cctune.models.llama2.llama2_tokenizer", "tokenizer", Tiny()).ok());
  auto typo = catalog.Lookup("torchtune.models.llama3_2.llama3_2_1bb", "model");
  ASSERT_FALSE(typo.ok());
  EXPECT_TRUE(absl::IsNotFound(typo.status()));
  EXPECT_THAT(Msg(typo.status()),
              HasSubstr("unknown component 'torchtune.models.llama3_2.llama3_2_1bb'; did you "
                        "mean 'cctune.models.llama3_2.llama3_2_1b'"));
  EXPECT_THAT(Msg(typo.status()),
              HasSubstr("registered model components: cctune.models.llama2.llama2_7b, "
                        "cctune.models.llama3_2.llama3_2_1b, cctune.models.llama3_2.llama3_2_3b"));
  EXPECT_THAT(Msg(typo.status()), ::testing::Not(HasSubstr("llama2_tokenizer,")));
  auto none = catalog.Lookup("x", "optimizer");
  EXPECT_THAT(Msg(none.status()), HasSubstr("no optimizer components are registered"));
  EXPECT_THAT(catalog.Names("tokenizer"), ElementsAre("cctune.models.llama2.llama2_tokenizer"));
}

// Reference edit distance: plain recursion with memo-free brute force on short strings.
int SlowDistance(const std::string& a, const std::string& b) {
  if (a.empty()) return static_cast<int>(b.size());
  if (b.empty()) return static_cast<int>(a.size());
  const int sub = SlowDistance(a.substr(1), b.substr(1)) + (a[0] == b[0] ? 0 : 1);
  return std::min({sub, SlowDistance(a.substr(1), b) + 1, SlowDistance(a, b.substr(1)) + 1});
}

TEST(CatalogTest, EditDistanceMatchesBruteForce) {
  Generator gen(5);
  for (int trial = 0; trial < 300; ++trial) {
    std::string a, b;
    const uint64_t na = gen.UniformInt(7), nb = gen.UniformInt(7);
    for (uint64_t i = 0; i < na; ++i) a.push_back(static_cast<char>('a' + gen.UniformInt(3)));
    for (uint64_t i = 0; i < nb; ++i) b.push_back(static_cast<char>('a' + gen.UniformInt(3)));
    EXPECT_EQ(EditDistance(a, b), SlowDistance(a, b)) << a << " / " << b;
  }
  EXPECT_THAT(NearMatches("num_layer", {"num_layers", "dim", "num_heads", "vocab_size"}),
              ElementsAre("num_layers"));
}

TEST(CatalogTest, ConcurrentRegistrationAndLookup) {
  ComponentCatalog catalog;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&catalog, t] {
      for (int i = 0; i < 50; ++i) {
        const std::string name = absl::StrCat("cctune.t", t, ".c", i);
        EXPECT_TRUE(catalog.Add(name, "model", Tiny()).ok());
        EXPECT_TRUE(catalog.Find(absl::StrCat("torchtune.t", t, ".c", i)).has_value());
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(catalog.Names("model").size(), 200u);
}

TEST(CatalogTest, GlobalIsOneInstance) {
  EXPECT_EQ(&ComponentCatalog::Global(), &ComponentCatalog::Global());
}

TEST(CatalogTest, DescribeComponentsListsKindsNamesSpellingsAndKeys) {
  ComponentCatalog catalog;
  ASSERT_TRUE(catalog
                  .Add("cctune.optim.AdamW", "optimizer",
                       Schema("", "AdamW")
                           .Required("lr", KeyType::Float(), "learning rate")
                           .Default("betas", KeyType::List(KeyType::Float()),
                                    ConfigNode::List({ConfigNode::Float(0.9),
                                                      ConfigNode::Float(0.999)}),
                                    "[beta1, beta2]"))
                  .ok());
  ASSERT_TRUE(catalog.AddAlias("torch.optim.AdamW", "cctune.optim.AdamW").ok());
  ASSERT_TRUE(catalog.Add("cctune.loggers.Stdout", "metric_logger", Schema("", "stdout")).ok());
  EXPECT_THAT(catalog.Kinds(), ElementsAre("metric_logger", "optimizer"));
  EXPECT_THAT(catalog.AliasesOf("cctune.optim.AdamW"), ElementsAre("torch.optim.AdamW"));

  absl::StatusOr<std::string> all = DescribeComponents(catalog);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_THAT(*all, HasSubstr("optimizer  cctune.optim.AdamW\n"));
  EXPECT_THAT(*all, HasSubstr("also: torchtune.optim.AdamW, torch.optim.AdamW\n"));
  EXPECT_THAT(*all, HasSubstr("KEY    TYPE           DEFAULT       REQUIRED  DOC\n"));
  EXPECT_THAT(*all, HasSubstr("lr     float          -             yes       learning rate\n"));
  EXPECT_THAT(*all, HasSubstr("betas  list of float  [0.9, 0.999]  no        [beta1, beta2]\n"));
  EXPECT_THAT(*all, HasSubstr("metric_logger  cctune.loggers.Stdout\n"));
  EXPECT_THAT(*all, HasSubstr("(no keys)"));
  EXPECT_LT(all->find("metric_logger"), all->find("optimizer"));  // kinds in order

  absl::StatusOr<std::string> optimizers = DescribeComponents(catalog, "optimizer");
  ASSERT_TRUE(optimizers.ok()) << optimizers.status();
  EXPECT_THAT(*optimizers, HasSubstr("cctune.optim.AdamW"));
  EXPECT_THAT(*optimizers, Not(HasSubstr("Stdout")));

  absl::StatusOr<std::string> none = DescribeComponents(catalog, "tokenizer");
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Msg(none.status()), HasSubstr("'tokenizer'"));
  EXPECT_THAT(Msg(none.status()), HasSubstr("kinds: metric_logger, optimizer"));
}

}  // namespace
}  // namespace cctune
