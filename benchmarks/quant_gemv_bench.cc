// Decode-shaped (m = 1..4) weight-only GEMV throughput: int8, int4 (groupsize 32 and 128) and
// the bf16 streaming GemmNT on the same [n, k] shapes, alternating in one process, as GB/s of
// weight bytes read (scales and zeros included). Eight matrices of a 1.1B Llama's MLP shape
// (8192 x 2048) are cycled so the weights do not fit in the last-level cache.
//
//   bazel run -c opt //benchmarks:quant_gemv_bench -- [reps=5] [m=1]
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/random.h"
#include "kernels/cpu/gemm/gemm.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/quant/quant.h"

namespace cctune {
namespace {

constexpr int64_t kN = 8192, kK = 2048, kLayers = 8;

struct Layer {
  std::vector<bf16> w16;
  std::vector<uint8_t> q8, q4a, q4b;
  std::vector<float> s8;
  std::vector<bf16> s4a, z4a, s4b, z4b;
};

cpu::QuantMatrix Int8(const Layer& l) {
  cpu::QuantMatrix m;
  m.n = kN;
  m.k = kK;
  m.data = l.q8.data();
  m.scales = l.s8.data();
  return m;
}
cpu::QuantMatrix Int4(const Layer& l, int64_t g) {
  cpu::QuantMatrix m;
  m.format = cpu::QuantFormat::kInt4Grouped;
  m.n = kN;
  m.k = kK;
  m.groupsize = g;
  m.data = g == 32 ? l.q4a.data() : l.q4b.data();
  m.scales4 = g == 32 ? l.s4a.data() : l.s4b.data();
  m.zeros4 = g == 32 ? l.z4a.data() : l.z4b.data();
  return m;
}

int Main(int reps, int64_t m) {
  Generator gen(1);
  std::vector<Layer> layers(kLayers);
  std::vector<float> w(kN * kK);
  for (Layer& l : layers) {
    for (float& x : w) x = static_cast<float>(gen.Uniform() - 0.5);
    l.w16.resize(kN * kK);
    for (int64_t i = 0; i < kN * kK; ++i) l.w16[i] = FloatToBf16(w[i]);
    l.q8.resize(kN * cpu::Int8RowBytes(kK));
    l.s8.resize(kN);
    cpu::QuantizeInt8(kN, kK, w.data(), DType::kF32, kK, l.q8.data(), l.s8.data());
    for (int64_t g : {32, 128}) {
      auto& q = g == 32 ? l.q4a : l.q4b;
      auto& s = g == 32 ? l.s4a : l.s4b;
      auto& z = g == 32 ? l.z4a : l.z4b;
      q.resize(kN * cpu::Int4RowBytes(kK));
      s.resize(kN * cpu::Int4Groups(kK, g));
      z.resize(s.size());
      cpu::QuantizeInt4(kN, kK, g, w.data(), DType::kF32, kK, q.data(), s.data(), z.data());
    }
  }
  std::vector<float> a(m * kK), c(m * kN);
  for (float& x : a) x = static_cast<float>(gen.Uniform() - 0.5);
  const char* names[] = {"bf16 GemmNT", "int8", "int4 g32", "int4 g128"};
  const double bytes[] = {2.0 * kN * kK, kN * (cpu::Int8RowBytes(kK) + 4.0),
                          kN * (cpu::Int4RowBytes(kK) + 4.0 * cpu::Int4Groups(kK, 32)),
                          kN * (cpu::Int4RowBytes(kK) + 4.0 * cpu::Int4Groups(kK, 128))};
  std::vector<double> best(4, 0);
  for (int r = 0; r < reps; ++r) {
    for (int f = 0; f < 4; ++f) {
      const auto t0 = std::chrono::steady_clock::now();
      for (const Layer& l : layers) {
        switch (f) {
          case 0:
            cpu::GemmNT(m, kN, kK, a.data(), kK, l.w16.data(), DType::kBF16, kK, c.data(), kN, 0);
            break;
          case 1:
            cpu::QuantGemmNT(m, a.data(), kK, Int8(l), c.data(), kN);
            break;
          default:
            cpu::QuantGemmNT(m, a.data(), kK, Int4(l, f == 2 ? 32 : 128), c.data(), kN);
        }
      }
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      best[f] = std::max(best[f], kLayers * bytes[f] / s / 1e9);
    }
  }
  std::printf("m=%lld, %d threads, isa %s, best of %d passes over %lld x [%lld, %lld]\n",
              static_cast<long long>(m), omp_get_max_threads(),
              cpu::IsaLevelName(cpu::ActiveIsaLevel()), reps, static_cast<long long>(kLayers),
              static_cast<long long>(kN), static_cast<long long>(kK));
  for (int f = 0; f < 4; ++f) {
    std::printf("  %-12s %8.2f GB/s of weights  (%.2f x bf16's weights/s)\n", names[f], best[f],
                (best[f] / bytes[f]) / (best[0] / bytes[0]));
  }
  return 0;
}

}  // namespace
}  // namespace cctune

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 5;
  const int64_t m = argc > 2 ? std::atoll(argv[2]) : 1;
  return cctune::Main(reps > 0 ? reps : 5, m > 0 ? m : 1);
}
