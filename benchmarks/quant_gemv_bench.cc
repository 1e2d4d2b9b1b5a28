// Decode-shaped (m = 1..4) weight-only GEMV throughput: int8, int4 (groupsize 32, 128, 256),
// with int8 activations (the default) and f32 ones, and the bf16 streaming GemmNT on the same
// [n, k] shapes, alternating in one process, as GB/s of weight bytes read (scales and zeros
// included) and ns per weight and thread (times the core clock: cycles per weight). Eight
// matrices of a 1.1B Llama's MLP shape (8192 x 2048) are cycled so the weights do not fit in
// the last-level cache; `hot` measures the kernels' compute in L2; m > 8 adds the panels
// against the int8-activation kernels (GFLOP/s).
//
//   bazel run -c opt //benchmarks:quant_gemv_bench -- [reps=5] [m=1] [hot]
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

constexpr int64_t kK = 2048;
// Rows of each matrix, matrices cycled and passes per timing: 8192, 8 and 1 from DRAM; with the
// `hot` argument 512, 1 and 64 (the int4 matrix, 512 KiB, stays in L2: the kernel's compute).
int64_t g_n = 8192, g_layers = 8, g_inner = 1;

struct Layer {
  std::vector<bf16> w16;
  std::vector<uint8_t> q8, q4a, q4b, q4c;
  std::vector<float> s8;
  std::vector<bf16> s4a, z4a, s4b, z4b, s4c, z4c;
};

cpu::QuantMatrix Int8(const Layer& l) {
  cpu::QuantMatrix m;
  m.n = g_n;
  m.k = kK;
  m.data = l.q8.data();
  m.scales = l.s8.data();
  return m;
}
cpu::QuantMatrix Int4(const Layer& l, int64_t g) {
  cpu::QuantMatrix m;
  m.format = cpu::QuantFormat::kInt4Grouped;
  m.n = g_n;
  m.k = kK;
  m.groupsize = g;
  m.data = g == 32 ? l.q4a.data() : g == 128 ? l.q4b.data() : l.q4c.data();
  m.scales4 = g == 32 ? l.s4a.data() : g == 128 ? l.s4b.data() : l.s4c.data();
  m.zeros4 = g == 32 ? l.z4a.data() : g == 128 ? l.z4b.data() : l.z4c.data();
  return m;
}

int Main(int reps, int64_t m) {
  Generator gen(1);
  std::vector<Layer> layers(g_layers);
  std::vector<float> w(g_n * kK);
  for (Layer& l : layers) {
    for (float& x : w) x = static_cast<float>(gen.Uniform() - 0.5);
    l.w16.resize(g_n * kK);
    for (int64_t i = 0; i < g_n * kK; ++i) l.w16[i] = FloatToBf16(w[i]);
    l.q8.resize(g_n * cpu::Int8RowBytes(kK));
    l.s8.resize(g_n);
    cpu::QuantizeInt8(g_n, kK, w.data(), DType::kF32, kK, l.q8.data(), l.s8.data());
    for (int64_t g : {32, 128, 256}) {
      auto& q = g == 32 ? l.q4a : g == 128 ? l.q4b : l.q4c;
      auto& s = g == 32 ? l.s4a : g == 128 ? l.s4b : l.s4c;
      auto& z = g == 32 ? l.z4a : g == 128 ? l.z4b : l.z4c;
      q.resize(g_n * cpu::Int4RowBytes(kK));
      s.resize(g_n * cpu::Int4Groups(kK, g));
      z.resize(s.size());
      cpu::QuantizeInt4(g_n, kK, g, w.data(), DType::kF32, kK, q.data(), s.data(), z.data());
    }
  }
  std::vector<float> a(m * kK), c(m * g_n);
  for (float& x : a) x = static_cast<float>(gen.Uniform() - 0.5);
  // Bytes of one matrix as stored (scales and zeros included).
  const double b16 = 2.0 * g_n * kK, b8 = g_n * (cpu::Int8RowBytes(kK) + 4.0);
  auto b4 = [](int64_t g) { return g_n * (cpu::Int4RowBytes(kK) + 4.0 * cpu::Int4Groups(kK, g)); };
  using Acts = cpu::QuantActivations;
  struct Variant {
    const char* name;
    double bytes;
    int format;  // 0 bf16, -1 bf16 without the software prefetch, 8 int8, else int4's groupsize
    Acts acts;
  };
  // The library's prefetch distance, read by setting it and putting it back.
  const int64_t kPf = cpu::gemm_internal::SetStreamPrefetchBytes(0);
  cpu::gemm_internal::SetStreamPrefetchBytes(kPf);
  const Variant vs[] = {{"bf16 GemmNT", b16, 0, Acts::kInt8},
                        {"bf16 no prefetch", b16, -1, Acts::kInt8},
                        {"int8", b8, 8, Acts::kInt8},
                        {"int8 f32-act", b8, 8, Acts::kF32},
                        {"int4 g32", b4(32), 32, Acts::kInt8},
                        {"int4 g32 f32-act", b4(32), 32, Acts::kF32},
                        {"int4 g128", b4(128), 128, Acts::kInt8},
                        {"int4 g256", b4(256), 256, Acts::kInt8},
                        {"int4 g256 f32-act", b4(256), 256, Acts::kF32}};
  constexpr int kV = sizeof(vs) / sizeof(vs[0]);
  std::vector<double> best(kV, 0);
  for (int r = 0; r < reps; ++r) {
    for (int f = 0; f < kV; ++f) {
      cpu::SetQuantActivations(vs[f].acts);
      const auto t0 = std::chrono::steady_clock::now();
      for (int64_t inner = 0; inner < g_inner; ++inner)
      for (const Layer& l : layers) {
        if (vs[f].format <= 0) {
          const int64_t pf = cpu::gemm_internal::SetStreamPrefetchBytes(vs[f].format < 0 ? 0 : kPf);
          cpu::GemmNT(m, g_n, kK, a.data(), kK, l.w16.data(), DType::kBF16, kK, c.data(), g_n, 0);
          cpu::gemm_internal::SetStreamPrefetchBytes(pf);
        } else if (vs[f].format == 8) {
          cpu::QuantGemmNT(m, a.data(), kK, Int8(l), c.data(), g_n);
        } else {
          cpu::QuantGemmNT(m, a.data(), kK, Int4(l, vs[f].format), c.data(), g_n);
        }
      }
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      best[f] = std::max(best[f], g_inner * g_layers * vs[f].bytes / s / 1e9);
    }
  }
  cpu::SetQuantActivations(Acts::kInt8);
  // Above kMaxStreamRows rows QuantGemmNT dequantizes panels to f32 for the GEMM (prefill);
  // beside it, the int8-activation streaming kernel forced at the same m.
  double stream4 = 0, stream8 = 0, panel4 = 0, panel8 = 0;
  if (m > cpu::quant_internal::kMaxStreamRows) {
    for (int r = 0; r < reps; ++r) {
      for (int f = 0; f < 4; ++f) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int64_t inner = 0; inner < g_inner; ++inner) {
          for (const Layer& l : layers) {
            const cpu::QuantMatrix q = f % 2 == 0 ? Int4(l, 32) : Int8(l);
            if (f < 2) {
              cpu::quant_internal::PanelQuantGemmNT(m, a.data(), kK, q, c.data(), g_n);
            } else if (f == 2) {
              cpu::quant_internal::StreamInt4ActGemmNT(cpu::quant_internal::BestInt8ActIsa(), m,
                                                       a.data(), kK, q, c.data(), g_n);
            } else {
              cpu::quant_internal::StreamInt8ActGemmNT(cpu::quant_internal::BestInt8ActIsa(), m,
                                                       a.data(), kK, q, c.data(), g_n);
            }
          }
        }
        const double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const double flops = 2.0 * m * g_n * kK * g_layers * g_inner / s / 1e9;
        double& best_f = f == 0 ? panel4 : f == 1 ? panel8 : f == 2 ? stream4 : stream8;
        best_f = std::max(best_f, flops);
      }
    }
  }
  std::printf("m=%lld, %d threads, isa %s, best of %d passes over %lld x %lld x [%lld, %lld]\n",
              static_cast<long long>(m), omp_get_max_threads(),
              cpu::IsaLevelName(cpu::ActiveIsaLevel()), reps, static_cast<long long>(g_inner),
              static_cast<long long>(g_layers),
              static_cast<long long>(g_n), static_cast<long long>(kK));
  // ns per weight and thread: the threads' time per weight (times the clock in GHz: cycles).
  for (int f = 0; f < kV; ++f) {
    const double weights_per_s = best[f] / vs[f].bytes * 1e9 * g_n * kK;
    std::printf("  %-18s %8.2f GB/s of weights  (%.2f x bf16's weights/s, %.3f ns per weight "
                "and thread)\n",
                vs[f].name, best[f], (best[f] / vs[f].bytes) / (best[0] / vs[0].bytes),
                omp_get_max_threads() / weights_per_s * 1e9);
  }
  if (stream4 > 0) {
    std::printf("  m=%lld GFLOP/s: int4 g32 panels %.1f, int8-activation kernel %.1f; int8 panels "
                "%.1f, int8-activation kernel %.1f\n",
                static_cast<long long>(m), panel4, stream4, panel8, stream8);
  }
  return 0;
}

}  // namespace
}  // namespace cctune

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 5;
  const int64_t m = argc > 2 ? std::atoll(argv[2]) : 1;
  if (argc > 3 && std::string(argv[3]) == "hot") {
    cctune::g_n = 512;
    cctune::g_layers = 1;
    cctune::g_inner = 64;
  }
  return cctune::Main(reps > 0 ? reps : 5, m > 0 ? m : 1);
}
