// Safetensors load throughput. Writes a multi-hundred-MB bf16 checkpoint into /tmp at start
// (CCTUNE_BENCH_MB, default 512; removed at exit), then measures:
//   BM_SaveSafetensors   atomic write of the whole file (fsync included)
//   BM_OpenZeroCopy      open + header parse + views of every tensor (no data touched)
//   BM_OpenAndReadAll/T  open + read every byte through the views (page faults included),
//                        T OpenMP threads (0: all)
//   BM_LoadAllToF32/T    open + bf16 -> f32 converted copies of every tensor, T OpenMP threads
//                        (0: all)
//   BM_LoadIntoF32/T     open + bf16 -> f32 into preallocated tensors (SafetensorsFile::LoadInto)
// Bytes/s count the file's bytes (out_GB/s: the f32 bytes written).
// Run: bazel run //checkpoint:safetensors_benchmark
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "checkpoint/safetensors.h"
#include "core/status.h"

namespace cctune {
namespace {

constexpr int64_t kRows = 2048, kCols = 2048;  // 8 MiB per bf16 tensor

std::string& BenchPath() {
  static std::string path = absl::StrCat("/tmp/cctune_safetensors_bench_", ::getpid(), ".safetensors");
  return path;
}

StateDict MakeTensors() {
  const char* mb_env = std::getenv("CCTUNE_BENCH_MB");
  const int64_t mb = mb_env ? std::atoll(mb_env) : 512;
  const int64_t per = kRows * kCols * 2;
  const int64_t n = std::max<int64_t>(1, mb * (int64_t{1} << 20) / per);
  StateDict sd;
  uint64_t state = 0x9e3779b97f4a7c15ull;
  for (int64_t i = 0; i < n; ++i) {
    Tensor t = ValueOrDie(Tensor::Empty({kRows, kCols}, DType::kBF16));
    uint16_t* p = static_cast<uint16_t*>(t.raw_data());
    for (int64_t j = 0; j < kRows * kCols; ++j) {
      state ^= state << 13;
      state ^= state >> 7;
      state ^= state << 17;
      // Finite bf16 values: sign, exponent around 2^-4..2^3, random mantissa.
      p[j] = static_cast<uint16_t>((state & 0x807f) | ((0x3b + (state >> 20) % 8) << 7));
    }
    sd[absl::StrCat("layers.", i, ".weight")] = t;
  }
  return sd;
}

const StateDict& Tensors() {
  static const StateDict* sd = new StateDict(MakeTensors());
  return *sd;
}

int64_t FileBytes() {
  static const int64_t bytes = [] {
    CCTUNE_CHECK_OK(SaveSafetensors(BenchPath(), Tensors(), {{"format", "pt"}}));
    auto f = ValueOrDie(SafetensorsFile::Open(BenchPath()));
    std::atexit([] { std::remove(BenchPath().c_str()); });
    return static_cast<int64_t>(f.mapping()->bytes());
  }();
  return bytes;
}

void BM_SaveSafetensors(benchmark::State& state) {
  const std::string path = BenchPath() + ".save";
  for (auto _ : state) CCTUNE_CHECK_OK(SaveSafetensors(path, Tensors()));
  std::remove(path.c_str());
  state.SetBytesProcessed(state.iterations() * FileBytes());
}
BENCHMARK(BM_SaveSafetensors)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(3);

void BM_OpenZeroCopy(benchmark::State& state) {
  const int64_t bytes = FileBytes();
  for (auto _ : state) {
    auto f = ValueOrDie(SafetensorsFile::Open(BenchPath()));
    StateDict sd = ValueOrDie(f.LoadAll());
    benchmark::DoNotOptimize(sd.begin()->second.raw_data());
  }
  state.SetBytesProcessed(state.iterations() * bytes);
}
BENCHMARK(BM_OpenZeroCopy)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_OpenAndReadAll(benchmark::State& state) {
  const int64_t bytes = FileBytes();
  const int threads = static_cast<int>(state.range(0));
  const int saved = omp_get_max_threads();
  if (threads > 0) omp_set_num_threads(threads);
  uint64_t sum = 0;
  for (auto _ : state) {
    auto f = ValueOrDie(SafetensorsFile::Open(BenchPath()));
    for (const auto& [name, t] : ValueOrDie(f.LoadAll())) {
      const uint64_t* p = static_cast<const uint64_t*>(t.raw_data());
      const int64_t n = static_cast<int64_t>(t.nbytes() / 8);
      uint64_t s = 0;
#pragma omp parallel for reduction(+ : s)
      for (int64_t i = 0; i < n; ++i) s += p[i];
      sum += s;
    }
  }
  omp_set_num_threads(saved);
  benchmark::DoNotOptimize(sum);
  state.SetBytesProcessed(state.iterations() * bytes);
}
BENCHMARK(BM_OpenAndReadAll)->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_LoadAllToF32(benchmark::State& state) {
  const int64_t bytes = FileBytes();
  const int threads = static_cast<int>(state.range(0));
  const int saved = omp_get_max_threads();
  if (threads > 0) omp_set_num_threads(threads);
  for (auto _ : state) {
    auto f = ValueOrDie(SafetensorsFile::Open(BenchPath()));
    StateDict sd = ValueOrDie(f.LoadAll(DType::kF32));
    benchmark::DoNotOptimize(sd.begin()->second.raw_data());
  }
  omp_set_num_threads(saved);
  state.SetBytesProcessed(state.iterations() * bytes);
  state.counters["out_GB/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * bytes * 2 / 1e9, benchmark::Counter::kIsRate);
}
// 0: all OpenMP threads.
BENCHMARK(BM_LoadAllToF32)->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond)->UseRealTime();

// Into preallocated (already touched) f32 tensors, as when filling a model's parameters:
// pure read + convert, without first-touch page faults on fresh memory.
void BM_LoadIntoF32(benchmark::State& state) {
  const int64_t bytes = FileBytes();
  const int threads = static_cast<int>(state.range(0));
  const int saved = omp_get_max_threads();
  if (threads > 0) omp_set_num_threads(threads);
  StateDict dst;
  for (const auto& [name, t] : Tensors()) {
    dst[name] = ValueOrDie(Tensor::Zeros(t.shape(), DType::kF32));
  }
  for (auto _ : state) {
    auto f = ValueOrDie(SafetensorsFile::Open(BenchPath()));
    for (auto& [name, t] : dst) CCTUNE_CHECK_OK(f.LoadInto(name, t));
  }
  omp_set_num_threads(saved);
  state.SetBytesProcessed(state.iterations() * bytes);
  state.counters["out_GB/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * bytes * 2 / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_LoadIntoF32)->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace cctune
