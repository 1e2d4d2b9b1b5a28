// ops::Dropout against an independent reference built on core's Generator (one Uniform() per
// element, in row-major order, from the state (seed, offset)): every float dtype and layout,
// offsets that are not multiples of 4 and beyond 2^32 words, seeds beyond 2^32; the fraction
// zeroed is about p and survivors are exactly x · f32(1/(1-p)); the bits do not depend on the
// thread count; different offsets give different masks and a row slice at the matching offset
// gives the same mask as the whole; in place works; bad arguments are refused.
#include <omp.h>

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/random.h"
#include "gtest/gtest.h"
#include "kernels/cpu/op_test_util.h"
#include "kernels/ops.h"

namespace cctune {
namespace {

using testing::kAllLayouts;
using testing::kFloatTypes;
using testing::LayoutName;
using testing::Randn;
using testing::Values;
using testing::WithLayout;

// The reference: element i is dropped iff the (offset + i)-th Uniform() of stream seed is < p;
// survivors are f32(x) · f32(1 / (1 - p)), rounded to `dtype`.
std::vector<double> Reference(const std::vector<double>& x, float p, uint64_t seed,
                              uint64_t offset, DType dtype) {
  Generator gen(seed);
  gen.SetState(seed, offset);
  const float scale = static_cast<float>(1.0 / (1.0 - static_cast<double>(p)));
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    out[i] = gen.Uniform() < p ? 0.f : static_cast<float>(x[i]) * scale;
  }
  const Tensor t = ValueOrDie(Tensor::FromVector(out, {static_cast<int64_t>(out.size())}));
  return Values(ValueOrDie(t.To(dtype)));
}

TEST(DropoutTest, MatchesGeneratorReferenceForEveryDtypeAndLayout) {
  Generator gen(301);
  struct Stream {
    uint64_t seed, offset;
  };
  const Stream streams[] = {{0, 0}, {7, 3}, {(uint64_t{1} << 40) + 5, 11},
                            {42, (uint64_t{1} << 34) + 2}};
  for (const Shape& shape : {Shape{7, 13}, Shape{3, 5, 33}, Shape{2, 1030}}) {
    for (DType dtype : kFloatTypes) {
      const Tensor x = Randn(shape, dtype, gen);
      const std::vector<double> xv = Values(x);
      for (auto layout : kAllLayouts) {
        for (float p : {0.1f, 0.5f, 0.9f}) {
          for (const Stream& st : streams) {
            const std::string ctx =
                absl::StrCat(ShapeToString(shape), " ", DTypeName(dtype), " ", LayoutName(layout),
                             " p=", p, " seed=", st.seed, " offset=", st.offset);
            const Tensor xl = WithLayout(x, layout);
            Tensor out = WithLayout(ValueOrDie(Tensor::Zeros(shape, dtype)), layout);
            ASSERT_TRUE(ops::Dropout(out, xl, p, st.seed, st.offset).ok()) << ctx;
            ASSERT_EQ(Values(out), Reference(xv, p, st.seed, st.offset, dtype)) << ctx;
          }
        }
      }
    }
  }
}

TEST(DropoutTest, ZeroesAboutPAndScalesSurvivorsExactly) {
  const int64_t n = 200000;
  const Tensor ones = ValueOrDie(Tensor::Full({n}, 1.0, DType::kF32));
  for (float p : {0.05f, 0.1f, 0.3f, 0.75f}) {
    Tensor out = ValueOrDie(Tensor::Empty({n}, DType::kF32));
    ASSERT_TRUE(ops::Dropout(out, ones, p, 123, 456).ok());
    const float scale = static_cast<float>(1.0 / (1.0 - static_cast<double>(p)));
    int64_t zeros = 0;
    double sum = 0;
    for (double v : Values(out)) {
      if (v == 0.0) {
        ++zeros;
      } else {
        ASSERT_EQ(v, static_cast<double>(scale)) << "p=" << p;
      }
      sum += v;
    }
    // Binomial(n, p): 5 standard deviations.
    const double sigma = std::sqrt(p * (1 - p) / n);
    EXPECT_NEAR(static_cast<double>(zeros) / n, p, 5 * sigma) << "p=" << p;
    EXPECT_NEAR(sum / n, 1.0, 5 * sigma / (1 - p)) << "p=" << p;  // E[out] = x
  }
}

TEST(DropoutTest, SameBitsForAnyThreadCount) {
  Generator gen(302);
  const Tensor x = Randn({96, 1500}, DType::kF32, gen);  // above the parallel threshold
  const Tensor xt = WithLayout(x, testing::Layout::kPadded);
  const int saved = omp_get_max_threads();
  std::vector<double> first, first_strided;
  for (int threads : {1, 3, 8}) {
    omp_set_num_threads(threads);
    Tensor out = ValueOrDie(Tensor::Empty(x.shape(), DType::kF32));
    ASSERT_TRUE(ops::Dropout(out, x, 0.2f, 9, 1).ok());
    Tensor out_s = ValueOrDie(Tensor::Empty(x.shape(), DType::kF32));
    ASSERT_TRUE(ops::Dropout(out_s, xt, 0.2f, 9, 1).ok());
    if (first.empty()) {
      first = Values(out);
      first_strided = Values(out_s);
      EXPECT_EQ(first, first_strided);
    } else {
      EXPECT_EQ(Values(out), first) << threads << " threads";
      EXPECT_EQ(Values(out_s), first_strided) << threads << " threads";
    }
  }
  omp_set_num_threads(saved);
}

TEST(DropoutTest, OffsetsSelectTheStreamAndSlicesMatch) {
  Generator gen(303);
  const int64_t rows = 40, cols = 27;
  const Tensor x = Randn({rows, cols}, DType::kF32, gen);
  auto mask_of = [](const Tensor& out) {
    std::vector<bool> m;
    for (double v : Values(out)) m.push_back(v != 0.0);
    return m;
  };
  Tensor a = ValueOrDie(Tensor::Empty({rows, cols}, DType::kF32));
  Tensor b = ValueOrDie(Tensor::Empty({rows, cols}, DType::kF32));
  ASSERT_TRUE(ops::Dropout(a, x, 0.5f, 5, 100).ok());
  ASSERT_TRUE(ops::Dropout(b, x, 0.5f, 5, 100 + rows * cols).ok());
  EXPECT_NE(mask_of(a), mask_of(b)) << "the next offset must give a fresh mask";
  ASSERT_TRUE(ops::Dropout(b, x, 0.5f, 6, 100).ok());
  EXPECT_NE(mask_of(a), mask_of(b)) << "another seed must give another mask";
  // Rows [r0, rows) at offset + r0 · cols are the same rows of the whole tensor's result (how
  // the trainer drops a chunk of rows of one [rows, cols] input).
  const int64_t r0 = 13;
  const Tensor x_rows = ValueOrDie(x.Narrow(0, r0, rows - r0));
  Tensor part = ValueOrDie(Tensor::Empty(x_rows.shape(), DType::kF32));
  ASSERT_TRUE(ops::Dropout(part, x_rows, 0.5f, 5, 100 + r0 * cols).ok());
  EXPECT_EQ(Values(part), Values(ValueOrDie(a.Narrow(0, r0, rows - r0))));
  // In place gives the same values; p = 0 copies.
  Tensor copy = ValueOrDie(Tensor::Empty({rows, cols}, DType::kF32));
  ASSERT_TRUE(copy.CopyFrom(x).ok());
  ASSERT_TRUE(ops::Dropout(copy, copy, 0.5f, 5, 100).ok());
  EXPECT_EQ(Values(copy), Values(a));
  ASSERT_TRUE(ops::Dropout(b, x, 0.f, 5, 100).ok());
  EXPECT_EQ(Values(b), Values(x));
}

TEST(DropoutTest, RejectsBadArguments) {
  const Tensor x = ValueOrDie(Tensor::Zeros({4, 3}, DType::kF32));
  Tensor out = ValueOrDie(Tensor::Empty({4, 3}, DType::kF32));
  for (float p : {-0.1f, 1.0f, 1.5f, NAN}) {
    const absl::Status st = ops::Dropout(out, x, p, 0, 0);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << p;
    EXPECT_NE(st.message().find("p ("), std::string::npos) << st;
  }
  Tensor wrong = ValueOrDie(Tensor::Empty({3, 4}, DType::kF32));
  absl::Status st = ops::Dropout(wrong, x, 0.5f, 0, 0);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("out"), std::string::npos) << st;
  const Tensor ids = ValueOrDie(Tensor::Zeros({4, 3}, DType::kI64));
  st = ops::Dropout(out, ids, 0.5f, 0, 0);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("x has dtype"), std::string::npos) << st;
}

}  // namespace
}  // namespace cctune
