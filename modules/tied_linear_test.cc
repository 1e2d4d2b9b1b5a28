#include "modules/tied_linear.h"

#include "core/random.h"
#include "gtest/gtest.h"
#include "kernels/cpu/gemm/gemm.h"
#include "modules/parameters.h"
#include "modules/reference.h"

namespace cctune {
namespace {

// A module owning an embedding and a tied output, as a decoder does.
class Tied : public Module {
 public:
  Tied() : emb(new Embedding(11, 6)), out(new TiedLinear(emb.get())) {
    RegisterModule("tok_embeddings", emb.get());
    RegisterModule("output", out.get());
  }
  std::unique_ptr<Embedding> emb;
  std::unique_ptr<TiedLinear> out;
};

TEST(TiedLinearTest, ProjectsWithTheEmbeddingTableAndOwnsNothing) {
  Tied m;
  EXPECT_EQ(m.out->NumParameters(), 0);
  EXPECT_EQ(m.NumParameters(), 66);  // the table is counted once
  auto arena = ValueOrDie(ParameterArena::Create(m, DType::kBF16, Device::Cpu()));
  ASSERT_EQ(arena.named_tensors().size(), 1u);
  EXPECT_EQ(arena.named_tensors()[0].first, "tok_embeddings.weight");
  Generator gen(4);
  ASSERT_TRUE(arena.InitializeRandom(gen).ok());
  EXPECT_EQ(m.out->in_dim(), 6);
  EXPECT_EQ(m.out->out_dim(), 11);
  Tensor x = ValueOrDie(RandomNormal({2, 3, 6}, DType::kF32, gen));
  cpu::ScopedExactGemm exact;  // f32 activations (bf16 weights may round them otherwise)
  Tensor y = ValueOrDie((*m.out)(x));
  EXPECT_EQ(y.shape(), (Shape{2, 3, 11}));
  const auto want =
      reference::Linear(reference::ToVec(x), 6, 6, reference::ToVec(m.emb->weight()), 11);
  EXPECT_LE(reference::MaxRelError(reference::ToVec(y), want), 2e-6);
  // Loading new embedding values changes the output projection too.
  StateDict sd;
  sd["tok_embeddings.weight"] = ValueOrDie(RandomNormal({11, 6}, DType::kF32, gen));
  ASSERT_TRUE(arena.LoadStateDict(sd).ok());
  Tensor y2 = ValueOrDie((*m.out)(x));
  EXPECT_NE(reference::ToVec(y2), reference::ToVec(y));
}

TEST(TiedLinearTest, FailsBeforeMaterialisation) {
  Tied m;
  Tensor x = ValueOrDie(Tensor::Zeros({1, 6}, DType::kF32));
  EXPECT_EQ((*m.out)(x).status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace cctune
