#include "models/registry.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "modules/parameters.h"

namespace cctune {
namespace {

using ::testing::HasSubstr;

int64_t MetaCount(TransformerDecoder& m) {
  return ValueOrDie(ParameterArena::Create(m, DType::kBF16, Device::Meta())).NumParameters();
}

TEST(ModelRegistryTest, BothSpellingsResolveToTheSameBuilder) {
  const ModelRegistry& r = ModelRegistry::Global();
  auto a = r.Find("cctune.models.llama3_2.llama3_2_1b");
  auto b = r.Find("torchtune.models.llama3_2.llama3_2_1b");
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*a, *b);
  auto m = r.Build("torchtune.models.llama3_2.llama3_2_1b");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(MetaCount(**m), 1235814400);
  auto m8 = r.Build("cctune.models.llama3_1.llama3_1_8b");
  ASSERT_TRUE(m8.ok());
  EXPECT_EQ(MetaCount(**m8), 8030261248);
}

TEST(ModelRegistryTest, EveryBuiltinBuildsOnMeta) {
  const ModelRegistry& r = ModelRegistry::Global();
  const auto names = r.Names();
  EXPECT_EQ(names.size(), 19u);
  for (const std::string& name : names) {
    const ModelBuilderInfo* info = ValueOrDie(r.Find(name));
    if (!info->required_args.empty()) continue;
    auto m = r.Build(name);
    ASSERT_TRUE(m.ok()) << name << ": " << m.status();
    EXPECT_GT(MetaCount(**m), 0) << name;
  }
}

TEST(ModelRegistryTest, ArgumentsAreTypedAndChecked) {
  const ModelRegistry& r = ModelRegistry::Global();
  auto untied = r.Build("cctune.models.llama3_2.llama3_2_1b", {{"tie_word_embeddings", "false"}});
  ASSERT_TRUE(untied.ok());
  EXPECT_EQ(MetaCount(**untied), 1235814400 + 128256LL * 2048);

  auto bad_bool = r.Build("cctune.models.llama3_2.llama3_2_1b", {{"tie_word_embeddings", "yes"}});
  EXPECT_THAT(std::string(bad_bool.status().message()),
              HasSubstr("'tie_word_embeddings' must be true or false, got 'yes'"));
  auto unknown = r.Build("cctune.models.llama3_1.llama3_1_8b", {{"vocab", "3"}});
  EXPECT_THAT(std::string(unknown.status().message()),
              HasSubstr("unknown argument 'vocab'; accepted: none"));

  auto missing = r.Build("cctune.models.llama2c.llama2c", {{"dim", "64"}});
  EXPECT_THAT(std::string(missing.status().message()),
              HasSubstr("missing required argument(s) hidden_dim"));
  auto stories = r.Build("cctune.models.llama2c.llama2c", {{"dim", "64"},
                                                           {"hidden_dim", "172"},
                                                           {"n_layers", "5"},
                                                           {"n_heads", "8"},
                                                           {"n_kv_heads", "4"},
                                                           {"vocab_size", "512"},
                                                           {"seq_len", "512"}});
  ASSERT_TRUE(stories.ok()) << stories.status();
  EXPECT_EQ(MetaCount(**stories), 260032);
  auto not_int = r.Build("cctune.models.tiny.tiny_llama", {{"embed_dim", "6x4"}});
  EXPECT_THAT(std::string(not_int.status().message()),
              HasSubstr("'embed_dim' must be an integer, got '6x4'"));
}

TEST(ModelRegistryTest, UnknownNamesListTheFamily) {
  const ModelRegistry& r = ModelRegistry::Global();
  auto typo = r.Find("torchtune.models.qwen2_5.qwen2_5_7b");
  ASSERT_EQ(typo.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(typo.status().message()),
              HasSubstr("cctune.models.qwen2_5.qwen2_5_7b_base"));
  EXPECT_THAT(std::string(typo.status().message()), ::testing::Not(HasSubstr("llama")));
  EXPECT_EQ(CanonicalModelName("torchtune.models.x.y"), "cctune.models.x.y");
  EXPECT_EQ(CanonicalModelName("cctune.models.x.y"), "cctune.models.x.y");
}

TEST(ModelRegistryTest, RegisteringChecksNames) {
  ModelRegistry r;
  ModelBuilderInfo info;
  info.name = "cctune.models.mine.my_model";
  info.build = [](const ModelArgs&) {
    return ModelRegistry::Global().Build("cctune.models.tiny.tiny_llama");
  };
  ASSERT_TRUE(r.Register(info).ok());
  EXPECT_EQ(r.Register(info).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE(r.Build("torchtune.models.mine.my_model").ok());
  info.name = "my_model";
  EXPECT_EQ(r.Register(info).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace cctune
