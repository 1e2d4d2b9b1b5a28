#include "kernels/cuda/cuda_test_util.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/device_interface.h"
#include "kernels/cpu/gemm/gemm.h"

namespace cctune {
namespace testing {
namespace {

// The CPU results every CUDA test compares against come from exact f32-operand GEMMs: where
// the CPU has full-rate bf16 dot products and no AMX (AVX-512 BF16, e.g. Zen 4), the fast
// route rounds the f32 operand A to bf16 (a ~0.4% difference that is not the CUDA kernel's:
// LinearBackwardMatchesCpu failed so under the emulator on Zen 4 while passing on an H200
// whose Intel host took the exact route at those sizes).
const cpu::ScopedExactGemm kExactCpuGemm;

}  // namespace

absl::Status CudaStatus() {
  CCTUNE_ASSIGN_OR_RETURN(DeviceInterface * iface, GetDeviceInterface(DeviceType::kCUDA));
  CCTUNE_ASSIGN_OR_RETURN(const int n, iface->DeviceCount());
  if (n < 1) return absl::UnavailableError("cudaGetDeviceCount reports 0 devices");
  return absl::OkStatus();
}

Pair PairFrom(const Tensor& cpu) {
  Pair p;
  p.cpu = ValueOrDie(cpu.Clone());
  p.gpu = ValueOrDie(cpu.To(Device::Cuda(0)));
  return p;
}

Pair RandomPair(const Shape& shape, DType dtype, Generator& gen, double scale) {
  Tensor t = ValueOrDie(Tensor::Empty(shape, dtype));
  CCTUNE_CHECK_OK(FillNormal(t, 0.0, scale, gen));
  return PairFrom(t);
}

Pair RandomIntPair(const Shape& shape, DType dtype, int64_t low, int64_t high, Generator& gen) {
  std::vector<int64_t> v(NumElements(shape));
  for (int64_t& x : v) x = low + static_cast<int64_t>(gen.UniformInt(high - low));
  Tensor t = ValueOrDie(Tensor::FromVector(v, shape, DType::kI64));
  return PairFrom(ValueOrDie(t.To(dtype)));
}

Pair OutputPair(const Shape& shape, DType dtype) {
  const double fill = IsFloating(dtype) ? std::numeric_limits<double>::quiet_NaN() : -7.0;
  Pair p;
  p.cpu = ValueOrDie(Tensor::Full(shape, fill, dtype));
  p.gpu = ValueOrDie(Tensor::Full(shape, fill, dtype, Device::Cuda(0)));
  return p;
}

Pair ViewPair(const Pair& p, const std::function<absl::StatusOr<Tensor>(const Tensor&)>& view) {
  return Pair{ValueOrDie(view(p.cpu)), ValueOrDie(view(p.gpu))};
}

double Ulp(DType dtype) {
  switch (dtype) {
    case DType::kBF16:
      return 1.0 / 128;
    case DType::kF16:
      return 1.0 / 1024;
    default:
      return 1.0 / 8388608;
  }
}

namespace {

::testing::AssertionResult SameMeta(const Tensor& gpu, const Tensor& cpu) {
  if (!gpu.device().is_cuda() || !cpu.device().is_cpu()) {
    return ::testing::AssertionFailure()
           << "expected (cuda, cpu) tensors, got (" << gpu.device().ToString() << ", "
           << cpu.device().ToString() << ")";
  }
  if (gpu.shape() != cpu.shape() || gpu.dtype() != cpu.dtype()) {
    return ::testing::AssertionFailure()
           << "cuda " << ShapeToString(gpu.shape()) << " " << DTypeName(gpu.dtype()) << " vs cpu "
           << ShapeToString(cpu.shape()) << " " << DTypeName(cpu.dtype());
  }
  return ::testing::AssertionSuccess();
}

}  // namespace

::testing::AssertionResult AllClose(const Tensor& gpu, const Tensor& cpu, double atol,
                                    double rtol) {
  ::testing::AssertionResult meta = SameMeta(gpu, cpu);
  if (!meta) return meta;
  auto g = gpu.ToDoubleVector();
  auto c = cpu.ToDoubleVector();
  if (!g.ok() || !c.ok()) {
    return ::testing::AssertionFailure() << "reading back: " << g.status() << " / " << c.status();
  }
  struct Bad {
    int64_t i;
    double g, c, excess;
  };
  std::vector<Bad> bad;
  for (size_t i = 0; i < c->size(); ++i) {
    const double gv = (*g)[i], cv = (*c)[i];
    if (std::isnan(cv) || std::isnan(gv)) {
      if (std::isnan(cv) != std::isnan(gv)) {
        bad.push_back({static_cast<int64_t>(i), gv, cv, std::numeric_limits<double>::infinity()});
      }
      continue;
    }
    if (std::isinf(cv) || std::isinf(gv)) {
      if (gv != cv) {
        bad.push_back({static_cast<int64_t>(i), gv, cv, std::numeric_limits<double>::infinity()});
      }
      continue;
    }
    const double err = std::fabs(gv - cv), tol = atol + rtol * std::fabs(cv);
    if (err > tol) bad.push_back({static_cast<int64_t>(i), gv, cv, err - tol});
  }
  if (bad.empty()) return ::testing::AssertionSuccess();
  std::sort(bad.begin(), bad.end(), [](const Bad& a, const Bad& b) { return a.excess > b.excess; });
  ::testing::AssertionResult r = ::testing::AssertionFailure();
  r << bad.size() << " of " << c->size() << " elements of " << ShapeToString(cpu.shape()) << " "
    << DTypeName(cpu.dtype()) << " differ beyond atol " << atol << " + rtol " << rtol
    << "; worst (flat index: cuda vs cpu):";
  for (size_t j = 0; j < std::min<size_t>(bad.size(), 8); ++j) {
    r << " [" << bad[j].i << "] " << bad[j].g << " vs " << bad[j].c << ";";
  }
  return r;
}

::testing::AssertionResult AllEqual(const Tensor& gpu, const Tensor& cpu) {
  ::testing::AssertionResult meta = SameMeta(gpu, cpu);
  if (!meta) return meta;
  auto g = gpu.To(Device::Cpu());
  if (!g.ok()) return ::testing::AssertionFailure() << g.status();
  auto gc = g->Contiguous();
  auto cc = cpu.Contiguous();
  if (!gc.ok() || !cc.ok()) {
    return ::testing::AssertionFailure() << gc.status() << " / " << cc.status();
  }
  const size_t esz = DTypeSize(cpu.dtype());
  const char* gp = static_cast<const char*>(gc->raw_data());
  const char* cp = static_cast<const char*>(cc->raw_data());
  int64_t mismatches = 0, first = -1;
  for (int64_t i = 0; i < cpu.numel(); ++i) {
    if (std::memcmp(gp + i * esz, cp + i * esz, esz) != 0) {
      if (first < 0) first = i;
      ++mismatches;
    }
  }
  if (mismatches == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << mismatches << " of " << cpu.numel() << " elements of " << ShapeToString(cpu.shape())
         << " " << DTypeName(cpu.dtype()) << " differ; first at flat index " << first << ": cuda "
         << LoadAsDouble(gp, cpu.dtype(), first) << " vs cpu "
         << LoadAsDouble(cp, cpu.dtype(), first);
}

}  // namespace testing
}  // namespace cctune
