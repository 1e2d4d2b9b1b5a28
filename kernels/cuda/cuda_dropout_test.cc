// ops::Dropout on CUDA tensors: bit-identical to the CPU backend (itself tested against a
// Generator-based reference in kernels/dropout_test.cc) for every float dtype, mixed dtypes,
// strided views, in place, offsets that are not multiples of 4 or beyond 2^32 words and seeds
// beyond 2^32; and, independently of the CPU backend, its mask is the Generator's: element i
// is zero exactly when the (offset + i)-th Uniform() is < p. Skips without a CUDA device.
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/random.h"
#include "core/tensor.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_test_util.h"
#include "kernels/ops.h"

namespace cctune {
namespace {

using ::cctune::testing::AllEqual;
using ::cctune::testing::OutputPair;
using ::cctune::testing::Pair;
using ::cctune::testing::PairFrom;
using ::cctune::testing::RandomPair;
using ::cctune::testing::ViewPair;

constexpr DType kFloats[] = {DType::kF32, DType::kBF16, DType::kF16};

class CudaDropoutTest : public ::testing::Test {
 protected:
  void SetUp() override { CCTUNE_SKIP_WITHOUT_CUDA(); }
};

struct Stream {
  uint64_t seed, offset;
};
constexpr Stream kStreams[] = {
    {0, 0}, {7, 3}, {(uint64_t{1} << 40) + 5, 6}, {42, (uint64_t{1} << 34) + 1}};

TEST_F(CudaDropoutTest, MatchesCpuBitForBit) {
  Generator gen(401);
  for (const Shape& shape : {Shape{1}, Shape{5, 7}, Shape{3, 4, 129}, Shape{2, 3000}}) {
    for (DType xt : kFloats) {
      for (DType ot : kFloats) {
        const Pair x = RandomPair(shape, xt, gen);
        for (float p : {0.1f, 0.5f}) {
          for (const Stream& st : kStreams) {
            const std::string ctx =
                absl::StrCat(ShapeToString(shape), " ", DTypeName(xt), "->", DTypeName(ot),
                             " p=", p, " seed=", st.seed, " offset=", st.offset);
            Pair out = OutputPair(shape, ot);
            ASSERT_TRUE(ops::Dropout(out.cpu, x.cpu, p, st.seed, st.offset).ok()) << ctx;
            ASSERT_TRUE(ops::Dropout(out.gpu, x.gpu, p, st.seed, st.offset).ok()) << ctx;
            EXPECT_TRUE(AllEqual(out.gpu, out.cpu)) << ctx;
          }
        }
      }
    }
  }
}

TEST_F(CudaDropoutTest, StridedViewsAndInPlaceMatchCpu) {
  Generator gen(402);
  for (DType dt : kFloats) {
    // x: a transposed view; out: a narrowed (row-padded) view.
    const Pair base = RandomPair({37, 21}, dt, gen);
    const Pair x = ViewPair(base, [](const Tensor& t) { return t.Transpose(0, 1); });
    Pair out_full = OutputPair({21, 40}, dt);
    Pair out = ViewPair(out_full, [](const Tensor& t) { return t.Narrow(1, 2, 37); });
    ASSERT_TRUE(ops::Dropout(out.cpu, x.cpu, 0.3f, 11, 5).ok());
    ASSERT_TRUE(ops::Dropout(out.gpu, x.gpu, 0.3f, 11, 5).ok());
    EXPECT_TRUE(AllEqual(out.gpu, out.cpu)) << DTypeName(dt);
    // In place, on a copy of the same values.
    Pair in_place = PairFrom(ValueOrDie(base.cpu.Contiguous()));
    ASSERT_TRUE(ops::Dropout(in_place.cpu, in_place.cpu, 0.3f, 11, 5).ok());
    ASSERT_TRUE(ops::Dropout(in_place.gpu, in_place.gpu, 0.3f, 11, 5).ok());
    EXPECT_TRUE(AllEqual(in_place.gpu, in_place.cpu)) << DTypeName(dt);
  }
}

TEST_F(CudaDropoutTest, MaskIsTheGeneratorStream) {
  const int64_t n = 10007;
  const Tensor ones = ValueOrDie(Tensor::Full({n}, 1.0, DType::kF32, Device::Cuda(0)));
  for (const Stream& st : kStreams) {
    const float p = 0.25f;
    Tensor out = ValueOrDie(Tensor::Empty({n}, DType::kF32, Device::Cuda(0)));
    ASSERT_TRUE(ops::Dropout(out, ones, p, st.seed, st.offset).ok());
    const std::vector<float> got = ValueOrDie(out.ToFloatVector());
    Generator gen(st.seed);
    gen.SetState(st.seed, st.offset);
    const float scale = static_cast<float>(1.0 / (1.0 - static_cast<double>(p)));
    int64_t mismatches = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float want = gen.Uniform() < p ? 0.f : scale;
      mismatches += got[i] != want;
    }
    EXPECT_EQ(mismatches, 0) << "seed=" << st.seed << " offset=" << st.offset;
  }
}

}  // namespace
}  // namespace cctune
