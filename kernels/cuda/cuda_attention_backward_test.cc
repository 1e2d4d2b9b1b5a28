// AttentionWithLse and AttentionBackward on CUDA tensors against the CPU backend (the
// reference, itself tested against fp64 and finite differences) on the same random inputs:
// MHA, grouped (8 query heads on 2 kv heads) and multi-query heads, causal with s_q == s_kv,
// s_q < s_kv (a kv prefix) and s_q > s_kv (leading rows that see no key), a bool mask with a
// fully masked row, odd lengths, head dims 1 to 200, strided views, f32/bf16/f16 inputs, and
// every combination of the saved out / lse. Gradients accumulate into nonzero tensors.
// Skips without a CUDA device.
#include <cstdint>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/random.h"
#include "core/tensor.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_test_util.h"
#include "kernels/ops.h"

namespace cctune {
namespace {

using ::cctune::testing::AllClose;
using ::cctune::testing::AllEqual;
using ::cctune::testing::OutputPair;
using ::cctune::testing::Pair;
using ::cctune::testing::PairFrom;
using ::cctune::testing::RandomPair;
using ::cctune::testing::Ulp;
using ::cctune::testing::ViewPair;

class CudaAttentionBackwardTest : public ::testing::Test {
 protected:
  void SetUp() override { CCTUNE_SKIP_WITHOUT_CUDA(); }
};

struct Case {
  int64_t b, n_h, n_kv, s_q, s_kv, h_d;
  bool causal;
  bool use_mask;  // random, with batch 0's query 1 fully masked
  float scale;
  bool strided;  // every [b, n, s, h_d] tensor a view of a [b, s, n, h_d] buffer
};

std::string Describe(const Case& c, DType dt) {
  return absl::StrCat(DTypeName(dt), " b ", c.b, " n_h ", c.n_h, " n_kv ", c.n_kv, " s_q ", c.s_q,
                      " s_kv ", c.s_kv, " h_d ", c.h_d, " causal ", c.causal, " mask ", c.use_mask,
                      " scale ", c.scale, " strided ", c.strided);
}

auto Transpose12() {
  return [](const Tensor& t) { return t.Transpose(1, 2); };
}

// A random (or NaN-filled when `output`) [b, n, s, h_d] pair, strided when the case says so.
Pair Make(const Case& c, int64_t n, int64_t s, DType dt, Generator& gen, bool output = false) {
  if (c.strided) {
    const Shape shape = {c.b, s, n, c.h_d};
    return ViewPair(output ? OutputPair(shape, dt) : RandomPair(shape, dt, gen), Transpose12());
  }
  const Shape shape = {c.b, n, s, c.h_d};
  return output ? OutputPair(shape, dt) : RandomPair(shape, dt, gen);
}

Pair MakeMask(const Case& c, Generator& gen) {
  std::vector<int64_t> m(c.b * c.s_q * c.s_kv);
  for (int64_t& e : m) e = gen.Uniform() < 0.7f ? 1 : 0;
  if (c.s_q > 1) {
    for (int64_t j = 0; j < c.s_kv; ++j) m[1 * c.s_kv + j] = 0;  // batch 0, query 1: none
  }
  return PairFrom(
      ValueOrDie(ValueOrDie(Tensor::FromVector(m, {c.b, c.s_q, c.s_kv})).To(DType::kBool)));
}

const Case kCases[] = {
    {2, 4, 4, 37, 37, 16, true, false, 0.f, false},   // MHA, causal, odd length
    {1, 8, 2, 37, 37, 64, true, true, 0.f, true},     // GQA 8/2, causal + mask, strided
    {2, 4, 1, 5, 37, 128, true, false, 0.3f, false},  // MQA, causal with a kv prefix
    {1, 2, 1, 37, 5, 32, true, false, 0.f, true},     // s_q > s_kv: the first rows see nothing
    {2, 3, 3, 1, 1, 16, false, false, 0.f, false},    // s = 1
    {1, 4, 2, 17, 70, 64, false, true, 0.f, true},    // mask (a fully masked row), long keys
    {1, 2, 1, 9, 11, 200, true, false, 0.f, false},   // the widest tiles (h_d up to 256)
    {1, 1, 1, 4, 4, 1, true, false, 0.f, false},      // h_d = 1
};

// Head dims above the tiled kernel's 256 take the inference kernel, which then writes the lse
// too: directly, and (a single query row over 600 keys) through its split-keys merge.
const Case kWideCases[] = {
    {1, 2, 1, 3, 7, 300, true, true, 0.f, false},
    {1, 2, 1, 1, 600, 300, false, false, 0.f, true},
};

TEST_F(CudaAttentionBackwardTest, AttentionWithLseMatchesCpu) {
  Generator gen(41);
  std::vector<Case> cases(std::begin(kCases), std::end(kCases));
  cases.insert(cases.end(), std::begin(kWideCases), std::end(kWideCases));
  for (const Case& c : cases) {
    for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
      const Pair q = Make(c, c.n_h, c.s_q, dt, gen), k = Make(c, c.n_kv, c.s_kv, dt, gen),
                 v = Make(c, c.n_kv, c.s_kv, dt, gen);
      Pair out = Make(c, c.n_h, c.s_q, dt, gen, /*output=*/true);
      Pair lse = c.strided ? ViewPair(OutputPair({c.b, c.s_q, c.n_h}, DType::kF32),
                                      [](const Tensor& t) { return t.Transpose(1, 2); })
                           : OutputPair({c.b, c.n_h, c.s_q}, DType::kF32);
      Pair mask;
      ops::AttentionOptions cpu_opt, gpu_opt;
      if (c.use_mask) {
        mask = MakeMask(c, gen);
        cpu_opt.mask = &mask.cpu;
        gpu_opt.mask = &mask.gpu;
      }
      cpu_opt.causal = gpu_opt.causal = c.causal;
      cpu_opt.scale = gpu_opt.scale = c.scale;
      CCTUNE_ASSERT_OK(ops::AttentionWithLse(out.cpu, lse.cpu, q.cpu, k.cpu, v.cpu, cpu_opt));
      CCTUNE_ASSERT_OK(ops::AttentionWithLse(out.gpu, lse.gpu, q.gpu, k.gpu, v.gpu, gpu_opt));
      const double tol = dt == DType::kF32 ? 1e-5 : 4 * Ulp(dt);
      EXPECT_TRUE(AllClose(out.gpu, out.cpu, tol, tol)) << Describe(c, dt);
      // lse is f32 from the same (rounded) inputs whatever dt; -inf rows must match exactly.
      EXPECT_TRUE(AllClose(lse.gpu, lse.cpu, 2e-5, 2e-5)) << Describe(c, dt);
    }
  }
}

// Which saved forward tensors AttentionBackward gets.
enum class Saved { kOutAndLse, kNone, kLseOnly, kOutOnly };

TEST_F(CudaAttentionBackwardTest, AttentionBackwardMatchesCpu) {
  Generator gen(42);
  for (const Case& c : kCases) {
    for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
      const Pair q = Make(c, c.n_h, c.s_q, dt, gen), k = Make(c, c.n_kv, c.s_kv, dt, gen),
                 v = Make(c, c.n_kv, c.s_kv, dt, gen);
      const Pair dy = Make(c, c.n_h, c.s_q, DType::kF32, gen);
      Pair mask;
      ops::AttentionOptions cpu_opt, gpu_opt;
      if (c.use_mask) {
        mask = MakeMask(c, gen);
        cpu_opt.mask = &mask.cpu;
        gpu_opt.mask = &mask.gpu;
      }
      cpu_opt.causal = gpu_opt.causal = c.causal;
      cpu_opt.scale = gpu_opt.scale = c.scale;
      // The CPU forward's out (in dt) and lse, given to both sides so the backward is compared
      // on the same saved values.
      CCTUNE_ASSERT_OK_AND_ASSIGN(Tensor out_cpu, Tensor::Empty({c.b, c.n_h, c.s_q, c.h_d}, dt));
      CCTUNE_ASSERT_OK_AND_ASSIGN(Tensor lse_cpu, Tensor::Empty({c.b, c.n_h, c.s_q}, DType::kF32));
      CCTUNE_ASSERT_OK(ops::AttentionWithLse(out_cpu, lse_cpu, q.cpu, k.cpu, v.cpu, cpu_opt));
      const Pair out = PairFrom(out_cpu), lse = PairFrom(lse_cpu);
      for (Saved saved : {Saved::kOutAndLse, Saved::kNone, Saved::kLseOnly, Saved::kOutOnly}) {
        const bool with_out = saved == Saved::kOutAndLse || saved == Saved::kOutOnly;
        const bool with_lse = saved == Saved::kOutAndLse || saved == Saved::kLseOnly;
        // Nonzero starting gradients: the op accumulates.
        Pair dq = Make(c, c.n_h, c.s_q, DType::kF32, gen);
        Pair dk = Make(c, c.n_kv, c.s_kv, DType::kF32, gen);
        Pair dv = Make(c, c.n_kv, c.s_kv, DType::kF32, gen);
        CCTUNE_ASSERT_OK(ops::AttentionBackward(dq.cpu, dk.cpu, dv.cpu, dy.cpu, q.cpu, k.cpu, v.cpu,
                                                with_out ? &out.cpu : nullptr,
                                                with_lse ? &lse.cpu : nullptr, cpu_opt));
        CCTUNE_ASSERT_OK(ops::AttentionBackward(dq.gpu, dk.gpu, dv.gpu, dy.gpu, q.gpu, k.gpu, v.gpu,
                                                with_out ? &out.gpu : nullptr,
                                                with_lse ? &lse.gpu : nullptr, gpu_opt));
        const std::string ctx = absl::StrCat(Describe(c, dt), " saved ", static_cast<int>(saved));
        // f32 math in another order (and expf vs the CPU's polynomial exp) on O(1) values.
        constexpr double kTol = 1e-4;
        EXPECT_TRUE(AllClose(dq.gpu, dq.cpu, kTol, kTol)) << "dq " << ctx;
        EXPECT_TRUE(AllClose(dk.gpu, dk.cpu, kTol, kTol)) << "dk " << ctx;
        EXPECT_TRUE(AllClose(dv.gpu, dv.cpu, kTol, kTol)) << "dv " << ctx;
      }
    }
  }
}

// dk/dv sum over the group's query heads without atomics: two runs give the same bits.
TEST_F(CudaAttentionBackwardTest, AttentionBackwardIsDeterministic) {
  Generator gen(43);
  const Case c = {2, 8, 2, 45, 45, 64, true, false, 0.f, false};
  const Pair q = Make(c, c.n_h, c.s_q, DType::kBF16, gen),
             k = Make(c, c.n_kv, c.s_kv, DType::kBF16, gen),
             v = Make(c, c.n_kv, c.s_kv, DType::kBF16, gen);
  const Pair dy = Make(c, c.n_h, c.s_q, DType::kF32, gen);
  ops::AttentionOptions opt;
  opt.causal = true;
  std::vector<Tensor> grads[2];
  for (int run = 0; run < 2; ++run) {
    CCTUNE_ASSERT_OK_AND_ASSIGN(Tensor dq,
                                Tensor::Zeros(q.gpu.shape(), DType::kF32, q.gpu.device()));
    CCTUNE_ASSERT_OK_AND_ASSIGN(Tensor dk,
                                Tensor::Zeros(k.gpu.shape(), DType::kF32, k.gpu.device()));
    CCTUNE_ASSERT_OK_AND_ASSIGN(Tensor dv,
                                Tensor::Zeros(v.gpu.shape(), DType::kF32, v.gpu.device()));
    CCTUNE_ASSERT_OK(
        ops::AttentionBackward(dq, dk, dv, dy.gpu, q.gpu, k.gpu, v.gpu, nullptr, nullptr, opt));
    grads[run] = {dq, dk, dv};
  }
  for (int i = 0; i < 3; ++i) {
    CCTUNE_ASSERT_OK_AND_ASSIGN(Tensor first, grads[0][i].To(Device::Cpu()));
    EXPECT_TRUE(AllEqual(grads[1][i], first)) << "gradient " << i;
  }
}

TEST_F(CudaAttentionBackwardTest, HeadDimAboveLimitIsAnError) {
  Generator gen(44);
  const Case c = {1, 1, 1, 2, 2, 300, false, false, 0.f, false};
  const Pair q = Make(c, 1, 2, DType::kF32, gen), k = Make(c, 1, 2, DType::kF32, gen),
             v = Make(c, 1, 2, DType::kF32, gen), dy = Make(c, 1, 2, DType::kF32, gen);
  Pair dq = Make(c, 1, 2, DType::kF32, gen), dk = Make(c, 1, 2, DType::kF32, gen),
       dv = Make(c, 1, 2, DType::kF32, gen);
  const absl::Status s = ops::AttentionBackward(dq.gpu, dk.gpu, dv.gpu, dy.gpu, q.gpu, k.gpu, v.gpu,
                                                nullptr, nullptr, {});
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
  EXPECT_NE(std::string(s.message()).find("head dim 300"), std::string::npos) << s;
}

}  // namespace
}  // namespace cctune
