#include "generation/model_loader.h"

#include <vector>

#include "checkpoint/llama2c.h"
#include "core/random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/tiny/tiny.h"
#include "tests/util/shared_dir.h"

namespace cctune {
namespace {

using ::testing::HasSubstr;

// A state dict with random values for every parameter of `model`.
StateDict RandomStateDict(TransformerDecoder& model, uint64_t seed) {
  ParameterArena arena = ValueOrDie(ParameterArena::Create(model, DType::kF32, Device::Cpu()));
  Generator gen(seed);
  CCTUNE_CHECK_OK(arena.InitializeRandom(gen));
  StateDict sd;
  for (const auto& [name, t] : arena.named_tensors()) sd[name] = ValueOrDie(t.Clone());
  return sd;
}

TEST(LoadWeightsTest, LoadsAndConvertsDType) {
  auto source = ValueOrDie(TinyLlama());
  StateDict sd = RandomStateDict(*source, 1);
  auto model = ValueOrDie(TinyLlama());
  ParameterArena arena = ValueOrDie(LoadWeights(*model, sd, DType::kBF16, Device::Cpu()));
  for (const auto& [name, t] : arena.named_tensors()) {
    EXPECT_EQ(t.dtype(), DType::kBF16) << name;
    std::vector<float> got = ValueOrDie(t.ToFloatVector());
    std::vector<float> want = ValueOrDie(sd.at(name).ToFloatVector());
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], std::abs(want[i]) / 128 + 1e-30) << name;
    }
  }
}

TEST(LoadWeightsTest, TiedModelIgnoresAliasedOutputButRejectsARealOne) {
  auto tied = ValueOrDie(TinyLlama(256, 2, 8, 2, 64, 160, 256, /*tie_word_embeddings=*/true));
  StateDict sd = RandomStateDict(*tied, 2);
  ASSERT_EQ(sd.count("output.weight"), 0u);
  sd["output.weight"] = sd.at("tok_embeddings.weight");  // an alias, as llama2.c files give
  auto model = ValueOrDie(TinyLlama(256, 2, 8, 2, 64, 160, 256, true));
  EXPECT_TRUE(LoadWeights(*model, sd, DType::kF32, Device::Cpu()).ok());

  sd["output.weight"] = ValueOrDie(sd.at("tok_embeddings.weight").Clone());  // not an alias
  auto model2 = ValueOrDie(TinyLlama(256, 2, 8, 2, 64, 160, 256, true));
  auto st = LoadWeights(*model2, sd, DType::kF32, Device::Cpu());
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(std::string(st.status().message()), HasSubstr("output.weight"));
}

TEST(LoadWeightsTest, MissingTensorIsAnError) {
  auto source = ValueOrDie(TinyLlama());
  StateDict sd = RandomStateDict(*source, 3);
  sd.erase("layers.1.mlp.w2.weight");
  auto model = ValueOrDie(TinyLlama());
  auto st = LoadWeights(*model, sd, DType::kF32, Device::Cpu());
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(std::string(st.status().message()), HasSubstr("layers.1.mlp.w2.weight"));
}

TEST(LoadLlama2cModelTest, Stories260K) {
  auto path = testing::SharedFile("models/stories260K/stories260K.bin");
  if (!path.ok()) GTEST_SKIP() << path.status();
  ConfigNode args = ValueOrDie(Llama2cModelArgs(*path));
  EXPECT_EQ(args.Child("dim")->int_value(), 64);
  EXPECT_EQ(args.Child("n_kv_heads")->int_value(), 4);
  EXPECT_EQ(args.Child("vocab_size")->int_value(), 512);
  LoadedModel m = ValueOrDie(LoadLlama2cModel(*path));
  EXPECT_EQ(m.model->vocab_size(), 512);
  EXPECT_EQ(m.model->num_layers(), 5u);
  EXPECT_EQ(m.model->max_seq_len(), 512);
  // The file is 28 header bytes, the weights, and the two legacy RoPE tables (512 x 4 floats
  // each) that the model does not load.
  EXPECT_EQ(m.arena.NumParameters() * 4 + 28 + 2 * 512 * 4 * 4, 1056540);
  Llama2cCheckpoint ck = ValueOrDie(LoadLlama2c(*path));
  std::vector<float> want =
      ValueOrDie(ck.state_dict.at("layers.3.attn.k_proj.weight").ToFloatVector());
  std::vector<float> got =
      ValueOrDie(ValueOrDie(m.arena.Get("layers.3.attn.k_proj.weight")).ToFloatVector());
  EXPECT_EQ(got, want);
}

TEST(LoadLlama2cModelTest, MissingFile) {
  auto st = LoadLlama2cModel("/nonexistent/model.bin");
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(std::string(st.status().message()), HasSubstr("/nonexistent/model.bin"));
}

}  // namespace
}  // namespace cctune
