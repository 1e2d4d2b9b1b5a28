#include "kernels/cpu/op_test_util.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace cctune {
namespace testing {

Tensor Randn(const Shape& shape, DType dtype, Generator& gen, double std) {
  Tensor t = ValueOrDie(Tensor::Empty(shape, dtype));
  CCTUNE_CHECK_OK(FillNormal(t, 0.0, std, gen));
  return t;
}

const char* LayoutName(Layout l) {
  switch (l) {
    case Layout::kContiguous:
      return "contiguous";
    case Layout::kPadded:
      return "padded";
    case Layout::kTransposed:
      return "transposed";
  }
  return "?";
}

Tensor EmptyLike(const Shape& shape, DType dtype, Layout layout) {
  const int nd = static_cast<int>(shape.size());
  if (layout == Layout::kContiguous || nd == 0) return ValueOrDie(Tensor::Empty(shape, dtype));
  if (layout == Layout::kPadded) {
    Shape wide = shape;
    wide.back() += 3;
    Tensor big = ValueOrDie(Tensor::Empty(wide, dtype));
    return ValueOrDie(big.Narrow(-1, 1, shape.back()));
  }
  Shape rev(shape.rbegin(), shape.rend());
  rev[0] *= 2;
  Tensor big = ValueOrDie(Tensor::Empty(rev, dtype));
  Tensor v = ValueOrDie(big.Slice(0, 0, rev[0], 2));
  std::vector<int> perm(nd);
  for (int i = 0; i < nd; ++i) perm[i] = nd - 1 - i;
  return ValueOrDie(v.Permute(perm));
}

Tensor WithLayout(const Tensor& t, Layout layout) { return WithLayout(t, layout, t.dtype()); }

Tensor WithLayout(const Tensor& t, Layout layout, DType dtype) {
  Tensor out = EmptyLike(t.shape(), dtype, layout);
  CCTUNE_CHECK_OK(out.CopyFrom(t));
  return out;
}

std::vector<double> Values(const Tensor& t) { return ValueOrDie(t.ToDoubleVector()); }

double Roundoff(DType t) {
  switch (t) {
    case DType::kBF16:
      return std::ldexp(1.0, -9);
    case DType::kF16:
      return std::ldexp(1.0, -12);
    default:
      return std::ldexp(1.0, -24);
  }
}

double SubnormalStep(DType t) { return t == DType::kF16 ? std::ldexp(1.0, -24) : 0.0; }

void ExpectClose(const std::vector<double>& actual, const std::vector<double>& want,
                 const std::vector<double>& atol, double rtol, const std::string& what) {
  ASSERT_EQ(actual.size(), want.size()) << what;
  ASSERT_TRUE(atol.size() == 1 || atol.size() == want.size()) << what;
  int failures = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double tol = (atol.size() == 1 ? atol[0] : atol[i]) + rtol * std::fabs(want[i]);
    const bool ok = std::fabs(actual[i] - want[i]) <= tol ||
                    (std::isnan(actual[i]) && std::isnan(want[i])) ||
                    (std::isinf(want[i]) && actual[i] == want[i]);
    if (!ok && ++failures <= 5) {
      ADD_FAILURE() << what << ": element " << i << " is " << actual[i] << ", expected " << want[i]
                    << " (tolerance " << tol << ")";
    }
  }
  if (failures > 5) ADD_FAILURE() << what << ": " << failures << " elements differ in all";
}

std::vector<double> NumericGradient(const std::function<double(const std::vector<double>&)>& f,
                                    std::vector<double> x, double step) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    const double h = step * std::max(1.0, std::fabs(x0));
    x[i] = x0 + h;
    const double up = f(x);
    x[i] = x0 - h;
    const double down = f(x);
    x[i] = x0;
    g[i] = (up - down) / (2 * h);
  }
  return g;
}

double DotProduct(const std::vector<double>& a, const std::vector<double>& b) {
  CCTUNE_CHECK(a.size() == b.size(), "DotProduct: sizes ", a.size(), " and ", b.size());
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

void ExpectGradClose(const std::vector<double>& actual, const std::vector<double>& want,
                     double tol, const std::string& what) {
  double scale = 0;
  for (double w : want) scale = std::max(scale, std::fabs(w));
  ExpectClose(actual, want, {tol * scale}, tol, what);
}

std::vector<double> Minus(const std::vector<double>& a, const std::vector<double>& b) {
  CCTUNE_CHECK(a.size() == b.size(), "Minus: sizes ", a.size(), " and ", b.size());
  std::vector<double> c(a.size());
  for (size_t i = 0; i < a.size(); ++i) c[i] = a[i] - b[i];
  return c;
}

}  // namespace testing
}  // namespace cctune
