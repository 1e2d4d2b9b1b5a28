// The CUDA weight-only GEMM (quant_kernels.h) against the CPU kernel (kernels/cpu/quant) on the
// same bytes, for int8 and int4 at several group sizes, odd k and several rows of x. Skips
// without a CUDA device; kernels/cuda/emu/run_emu.sh runs it on the emulator.
#include <cmath>
#include <cstring>
#include <vector>

#include "core/random.h"
#include "core/tensor.h"
#include "gtest/gtest.h"
#include "kernels/cpu/quant/quant.h"
#include "kernels/cuda/cuda_test_util.h"

#ifdef CCTUNE_WITH_CUDA
#include <cuda_runtime_api.h>

#include "kernels/cuda/quant_kernels.h"
#endif

namespace cctune {
namespace {

#ifdef CCTUNE_WITH_CUDA

struct Case {
  bool int4;
  int64_t m, n, k, groupsize;
};

Tensor Bytes(const void* p, int64_t n) {
  Tensor t = ValueOrDie(Tensor::Empty({(n + 3) / 4}, DType::kI32));
  std::memset(t.raw_data(), 0, t.nbytes());
  std::memcpy(t.raw_data(), p, n);
  return t;
}

void Check(const Case& c, Generator& gen) {
  SCOPED_TRACE(::testing::Message() << (c.int4 ? "int4" : "int8") << " m=" << c.m << " n=" << c.n
                                    << " k=" << c.k << " groupsize=" << c.groupsize);
  std::vector<float> w(c.n * c.k), a(c.m * c.k);
  for (float& x : w) x = static_cast<float>(2 * gen.Uniform() - 1);
  for (float& x : a) x = static_cast<float>(2 * gen.Uniform() - 1);
  cpu::QuantMatrix qm;
  qm.format = c.int4 ? cpu::QuantFormat::kInt4Grouped : cpu::QuantFormat::kInt8PerChannel;
  qm.n = c.n;
  qm.k = c.k;
  qm.groupsize = c.groupsize;
  const int64_t rb = c.int4 ? cpu::Int4RowBytes(c.k) : cpu::Int8RowBytes(c.k);
  const int64_t groups = c.int4 ? cpu::Int4Groups(c.k, c.groupsize) : 1;
  std::vector<uint8_t> data(c.n * rb);
  std::vector<float> scales(c.n);
  std::vector<bf16> s4(c.n * groups), z4(c.n * groups);
  if (c.int4) {
    cpu::QuantizeInt4(c.n, c.k, c.groupsize, w.data(), DType::kF32, c.k, data.data(), s4.data(),
                      z4.data());
  } else {
    cpu::QuantizeInt8(c.n, c.k, w.data(), DType::kF32, c.k, data.data(), scales.data());
  }
  qm.data = data.data();
  qm.scales = scales.data();
  qm.scales4 = s4.data();
  qm.zeros4 = z4.data();
  // The CUDA kernel keeps the activations in f32: so does the reference (the CPU default
  // quantizes them to int8 per block of 64, an error of ~0.4% that is not the kernel's).
  std::vector<float> want(c.m * c.n);
  const cpu::QuantActivations mode = cpu::GetQuantActivations();
  cpu::SetQuantActivations(cpu::QuantActivations::kF32);
  cpu::QuantGemmNT(c.m, a.data(), c.k, qm, want.data(), c.n);
  cpu::SetQuantActivations(mode);
  std::vector<float> deq(c.n * c.k);
  cpu::Dequantize(qm, 0, c.n, deq.data(), c.k);

  const Device gpu = Device::Cuda(0);
  Tensor d_data = ValueOrDie(Bytes(data.data(), data.size()).To(gpu));
  Tensor d_scales = ValueOrDie(Bytes(scales.data(), scales.size() * 4).To(gpu));
  Tensor d_s4 = ValueOrDie(Bytes(s4.data(), s4.size() * 2).To(gpu));
  Tensor d_z4 = ValueOrDie(Bytes(z4.data(), z4.size() * 2).To(gpu));
  Tensor d_a = ValueOrDie(Bytes(a.data(), a.size() * 4).To(gpu));
  Tensor d_c = ValueOrDie(Tensor::Empty({c.m * c.n}, DType::kF32, gpu));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  cuda::CuQuantMatrix dw;
  dw.int4 = c.int4;
  dw.n = c.n;
  dw.k = c.k;
  dw.groupsize = c.groupsize;
  dw.row_bytes = rb;
  dw.groups = groups;
  dw.data = static_cast<const uint8_t*>(d_data.raw_data());
  dw.scales = static_cast<const float*>(d_scales.raw_data());
  dw.scales4 = static_cast<const uint16_t*>(d_s4.raw_data());
  dw.zeros4 = static_cast<const uint16_t*>(d_z4.raw_data());
  ASSERT_EQ(cuda::LaunchQuantGemmNT(c.m, static_cast<const float*>(d_a.raw_data()), c.k, dw,
                                    static_cast<float*>(d_c.raw_data()), c.n, nullptr),
            cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<double> got = ValueOrDie(ValueOrDie(d_c.To(Device::Cpu())).ToDoubleVector());
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < c.n; ++j) {
      // Two f32 sums of the same k products (in other orders and, for int4, split
      // differently): both within (k + 16)·2^-23 of the terms' magnitudes.
      double mag = 0;
      float smax = 0, zmax = 0;
      for (int64_t g = 0; g < groups && c.int4; ++g) {
        smax = std::max(smax, Bf16ToFloat(s4[j * groups + g]));
        zmax = std::max(zmax, std::fabs(Bf16ToFloat(z4[j * groups + g])));
      }
      for (int64_t t = 0; t < c.k; ++t) {
        mag += std::fabs(a[i * c.k + t]) * (std::fabs(deq[j * c.k + t]) + 24 * smax + zmax);
      }
      ASSERT_NEAR(got[i * c.n + j], want[i * c.n + j], 2 * (c.k + 16) * std::ldexp(mag, -23))
          << i << " " << j;
    }
  }
}

TEST(CudaQuantTest, MatchesTheCpuKernel) {
  CCTUNE_SKIP_WITHOUT_CUDA();
  Generator gen(3);
  const Case cases[] = {
      {false, 1, 1, 1, 0},     {false, 1, 37, 129, 0},   {false, 5, 9, 300, 0},
      {false, 4, 64, 2048, 0}, {true, 1, 1, 1, 32},      {true, 1, 37, 129, 32},
      {true, 3, 20, 200, 64},  {true, 6, 17, 512, 128},  {true, 1, 64, 2048, 256},
      {true, 2, 5, 33, 256},
  };
  for (const Case& c : cases) Check(c, gen);
}

#else

TEST(CudaQuantTest, MatchesTheCpuKernel) { GTEST_SKIP() << "built without CUDA"; }

#endif

}  // namespace
}  // namespace cctune
