// The optimizer-update ops (AdamWUpdate, SgdUpdate, SquaredNorm) on CUDA against the CPU
// backend (itself tested against fp64 in kernels/optim_test.cc): several steps from the same
// state, f32 parameters and bf16 parameters with f32 master copies, sizes from one element to
// several 2^14-element chunks with odd remainders. The kernels use the CPU's f32 formulas, so
// the states agree to a few f32 roundings; a bf16 parameter must be exactly the rounding of
// its own master copy. Also: the broadcast-zero copy behind Optimizer::ZeroGrad on a device.
// Skips without a CUDA device.
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/random.h"
#include "core/tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_test_util.h"
#include "kernels/ops.h"

namespace cctune {
namespace {

using ::cctune::testing::AllClose;
using ::cctune::testing::AllEqual;
using ::cctune::testing::Pair;
using ::cctune::testing::PairFrom;
using ::cctune::testing::RandomPair;
using ::testing::HasSubstr;

const int64_t kSizes[] = {1, 7, 1000, 16385, 100003};

class CudaOptimTest : public ::testing::Test {
 protected:
  void SetUp() override { CCTUNE_SKIP_WITHOUT_CUDA(); }
};

// A few f32 roundings of O(1) values per step, a few steps.
constexpr double kAtol = 2e-6, kRtol = 1e-5;

Pair ZerosPair(int64_t n) { return PairFrom(ValueOrDie(Tensor::Zeros({n}, DType::kF32))); }

// The gpu bf16 parameter is exactly the rounding of the gpu master copy (rounded on the CPU).
::testing::AssertionResult IsRoundingOf(const Tensor& gpu_param, const Tensor& gpu_master) {
  Tensor master = ValueOrDie(gpu_master.To(Device::Cpu()));
  return AllEqual(gpu_param, ValueOrDie(master.To(DType::kBF16)));
}

TEST_F(CudaOptimTest, AdamWMatchesCpuOverSeveralSteps) {
  for (const int64_t n : kSizes) {
    for (const double beta1 : {0.9, 0.3}) {  // both of torch's lerp formulas
      for (const bool bf16 : {false, true}) {
        SCOPED_TRACE(absl::StrCat("n=", n, " beta1=", beta1, bf16 ? " bf16" : " f32"));
        Generator gen(n * 3 + static_cast<int>(beta1 * 10));
        Pair param = RandomPair({n}, bf16 ? DType::kBF16 : DType::kF32, gen);
        Pair master;
        if (bf16) {
          master.cpu = ValueOrDie(param.cpu.To(DType::kF32));
          master.gpu = ValueOrDie(param.gpu.To(DType::kF32));  // a device-side cast
        }
        Pair m = ZerosPair(n), v = ZerosPair(n);
        ops::AdamWStep h;
        h.lr = 1e-2;
        h.beta1 = beta1;
        h.beta2 = 0.99;
        h.weight_decay = 0.1;
        for (int step = 1; step <= 4; ++step) {
          Pair g = RandomPair({n}, DType::kF32, gen, step == 2 ? 1e-3 : 1.0);
          h.step = step;
          CCTUNE_ASSERT_OK(
              ops::AdamWUpdate(param.cpu, bf16 ? &master.cpu : nullptr, m.cpu, v.cpu, g.cpu, h));
          CCTUNE_ASSERT_OK(
              ops::AdamWUpdate(param.gpu, bf16 ? &master.gpu : nullptr, m.gpu, v.gpu, g.gpu, h));
          EXPECT_TRUE(AllClose(m.gpu, m.cpu, kAtol, kRtol)) << "exp_avg, step " << step;
          EXPECT_TRUE(AllClose(v.gpu, v.cpu, kAtol, kRtol)) << "exp_avg_sq, step " << step;
          if (bf16) {
            EXPECT_TRUE(AllClose(master.gpu, master.cpu, kAtol, kRtol)) << "master, step " << step;
            EXPECT_TRUE(IsRoundingOf(param.gpu, master.gpu)) << "step " << step;
          } else {
            EXPECT_TRUE(AllClose(param.gpu, param.cpu, kAtol, kRtol)) << "param, step " << step;
          }
        }
      }
    }
  }
}

TEST_F(CudaOptimTest, SgdMatchesCpuForEachVariant) {
  struct Case {
    double momentum, dampening, weight_decay;
    bool nesterov;
  };
  const Case cases[] = {{0, 0, 0, false},        {0, 0, 0.01, false},   {0.9, 0, 0, false},
                        {0.9, 0.2, 0.01, false}, {0.9, 0, 0.01, true}, {0.5, 0, 0, true}};
  for (const Case& c : cases) {
    for (const int64_t n : kSizes) {
      for (const bool bf16 : {false, true}) {
        SCOPED_TRACE(absl::StrCat("n=", n, " momentum=", c.momentum, " dampening=", c.dampening,
                                  " wd=", c.weight_decay, " nesterov=", c.nesterov,
                                  bf16 ? " bf16" : " f32"));
        Generator gen(n * 5 + static_cast<int>(c.momentum * 10 + c.dampening * 100));
        Pair param = RandomPair({n}, bf16 ? DType::kBF16 : DType::kF32, gen);
        Pair master;
        if (bf16) {
          master.cpu = ValueOrDie(param.cpu.To(DType::kF32));
          master.gpu = ValueOrDie(param.gpu.To(DType::kF32));
        }
        // Garbage in the buffer: the first step must overwrite it.
        Pair buf = PairFrom(ValueOrDie(Tensor::Full({n}, 123.0, DType::kF32)));
        const bool momentum = c.momentum != 0;
        ops::SgdStep h;
        h.lr = 0.05;
        h.momentum = c.momentum;
        h.dampening = c.dampening;
        h.weight_decay = c.weight_decay;
        h.nesterov = c.nesterov;
        for (int step = 0; step < 3; ++step) {
          Pair g = RandomPair({n}, DType::kF32, gen);
          h.first = step == 0;
          CCTUNE_ASSERT_OK(ops::SgdUpdate(param.cpu, bf16 ? &master.cpu : nullptr,
                                          momentum ? &buf.cpu : nullptr, g.cpu, h));
          CCTUNE_ASSERT_OK(ops::SgdUpdate(param.gpu, bf16 ? &master.gpu : nullptr,
                                          momentum ? &buf.gpu : nullptr, g.gpu, h));
          if (momentum) {
            EXPECT_TRUE(AllClose(buf.gpu, buf.cpu, kAtol, kRtol)) << "buffer, step " << step;
          }
          if (bf16) {
            EXPECT_TRUE(AllClose(master.gpu, master.cpu, kAtol, kRtol)) << "master, step " << step;
            EXPECT_TRUE(IsRoundingOf(param.gpu, master.gpu)) << "step " << step;
          } else {
            EXPECT_TRUE(AllClose(param.gpu, param.cpu, kAtol, kRtol)) << "param, step " << step;
          }
        }
      }
    }
  }
}

TEST_F(CudaOptimTest, SquaredNormMatchesCpuAndIsDeterministic) {
  const int64_t sizes[] = {1, 255, 16383, 16384, 16385, 300007, (int64_t{1} << 21) + 77};
  for (const int64_t n : sizes) {
    SCOPED_TRACE(absl::StrCat("n=", n));
    Generator gen(n);
    Pair x = RandomPair({n}, DType::kF32, gen, 3.0);
    double cpu = 0.25, gpu = 0.25, again = 0.25;  // both accumulate into what is there
    CCTUNE_ASSERT_OK(ops::SquaredNorm(&cpu, x.cpu));
    CCTUNE_ASSERT_OK(ops::SquaredNorm(&gpu, x.gpu));
    CCTUNE_ASSERT_OK(ops::SquaredNorm(&again, x.gpu));
    // Exact fp64 squares summed in two fixed orders.
    EXPECT_NEAR(gpu, cpu, 1e-12 * cpu);
    EXPECT_EQ(std::memcmp(&gpu, &again, sizeof(double)), 0) << gpu << " then " << again;
  }
  // Any shape is used flat; an empty tensor adds nothing.
  Generator gen(9);
  Pair x = RandomPair({3, 5, 7}, DType::kF32, gen);
  double cpu = 0, gpu = 0;
  CCTUNE_ASSERT_OK(ops::SquaredNorm(&cpu, x.cpu));
  CCTUNE_ASSERT_OK(ops::SquaredNorm(&gpu, x.gpu));
  EXPECT_NEAR(gpu, cpu, 1e-12 * cpu);
  Tensor empty = ValueOrDie(Tensor::Empty({0}, DType::kF32, Device::Cuda(0)));
  CCTUNE_ASSERT_OK(ops::SquaredNorm(&gpu, empty));
  EXPECT_NEAR(gpu, cpu, 1e-12 * cpu);
  // A non-finite element gives a non-finite norm (the caller's signal to skip the step).
  Tensor inf = ValueOrDie(Tensor::Full({1000}, std::numeric_limits<double>::infinity(),
                                       DType::kF32, Device::Cuda(0)));
  double s = 0;
  CCTUNE_ASSERT_OK(ops::SquaredNorm(&s, inf));
  EXPECT_TRUE(std::isinf(s));
}

TEST_F(CudaOptimTest, RejectsTensorsOnTwoDevices) {
  Tensor p = ValueOrDie(Tensor::Zeros({10}, DType::kF32, Device::Cuda(0)));
  Tensor m = ValueOrDie(Tensor::Zeros({10}, DType::kF32, Device::Cuda(0)));
  Tensor v = ValueOrDie(Tensor::Zeros({10}, DType::kF32, Device::Cuda(0)));
  Tensor g = ValueOrDie(Tensor::Zeros({10}, DType::kF32));
  EXPECT_THAT(std::string(ops::AdamWUpdate(p, nullptr, m, v, g, {}).message()),
              HasSubstr("grad is on cpu but param is on cuda:0"));
  EXPECT_THAT(std::string(ops::SgdUpdate(p, nullptr, nullptr, g, {}).message()),
              HasSubstr("grad is on cpu but param is on cuda:0"));
}

// Optimizer::ZeroGrad's device path: a broadcast 0 copied over the buffer (NaNs included).
TEST_F(CudaOptimTest, BroadcastZeroCopyClearsADeviceBuffer) {
  const int64_t n = 100003;
  Tensor g = ValueOrDie(
      Tensor::Full({n}, std::numeric_limits<double>::quiet_NaN(), DType::kF32, Device::Cuda(0)));
  Tensor zero = ValueOrDie(Tensor::Zeros({1}, DType::kF32, Device::Cuda(0)));
  CCTUNE_ASSERT_OK(g.CopyFrom(ValueOrDie(zero.Expand({n}))));
  EXPECT_TRUE(AllEqual(g, ValueOrDie(Tensor::Zeros({n}, DType::kF32))));
}

}  // namespace
}  // namespace cctune
