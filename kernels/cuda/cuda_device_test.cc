// Tests of the CUDA DeviceInterface: allocation and accounting, copies, strided casts. Each
// result is compared bit for bit with the same operation on CPU tensors (core's
// StridedCopyCpu is the reference for conversions). Skips without a CUDA device.
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/device_interface.h"
#include "core/random.h"
#include "core/tensor.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_test_util.h"

#ifdef CCTUNE_WITH_CUDA
#include "kernels/cuda/cuda_device.h"
#endif

namespace cctune {
namespace {

using ::cctune::testing::AllEqual;
using ::cctune::testing::Pair;
using ::cctune::testing::PairFrom;

constexpr DType kAllTypes[] = {DType::kF32, DType::kBF16, DType::kF16,
                               DType::kI32, DType::kI64,  DType::kBool};

class CudaDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override { CCTUNE_SKIP_WITHOUT_CUDA(); }
};

// Values that exercise every conversion: fractions of both signs (truncation), halfway cases
// for bf16/f16 rounding, f16 overflow (inf) and subnormals, zeros of both signs, integers too
// large for f16.
Tensor MixedValues(const Shape& shape, Generator& gen) {
  const float specials[] = {0.f,     -0.f,    1.5f,         -2.5f,  65504.f, 65520.f,
                            70000.f, -1e6f,   1e-6f,        -3e-7f, 6e-8f,   1.00390625f,
                            257.f,   -33.75f, 0.099999994f, 1e30f,  -1e-30f, 3.f};
  std::vector<float> v(NumElements(shape));
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = i % 3 == 0 ? specials[(i / 3) % (sizeof(specials) / sizeof(float))]
                      : static_cast<float>(gen.Normal() * 100.0);
  }
  return ValueOrDie(Tensor::FromVector(v, shape, DType::kF32));
}

TEST_F(CudaDeviceTest, HasADevice) {
  CCTUNE_ASSERT_OK_AND_ASSIGN(DeviceInterface * iface, GetDeviceInterface(DeviceType::kCUDA));
  CCTUNE_ASSERT_OK_AND_ASSIGN(const int n, iface->DeviceCount());
  EXPECT_GE(n, 1);
  EXPECT_TRUE(DeviceAvailable(Device::Cuda(0)));
  EXPECT_FALSE(DeviceAvailable(Device::Cuda(n)));
}

TEST_F(CudaDeviceTest, RoundTripKeepsEveryBit) {
  Generator gen(1);
  for (DType dt : kAllTypes) {
    for (const Shape& shape : {Shape{1}, Shape{7, 13}, Shape{3, 1, 257}, Shape{0, 5}}) {
      Tensor host = ValueOrDie(MixedValues(shape, gen).To(dt));
      CCTUNE_ASSERT_OK_AND_ASSIGN(Tensor dev, host.To(Device::Cuda(0)));
      EXPECT_TRUE(dev.device().is_cuda());
      EXPECT_TRUE(AllEqual(dev, host)) << DTypeName(dt) << " " << ShapeToString(shape);
    }
  }
}

TEST_F(CudaDeviceTest, StridedCopyCastsLikeCpu) {
  Generator gen(2);
  const Tensor src_host = MixedValues({4, 6, 5}, gen);
  for (DType from : kAllTypes) {
    const Pair src = PairFrom(ValueOrDie(src_host.To(from)));
    // A permuted, non-contiguous source read into a contiguous destination of every dtype.
    const Pair view = testing::ViewPair(src, [](const Tensor& t) { return t.Permute({2, 0, 1}); });
    for (DType to : kAllTypes) {
      if (IsFloating(from) && !IsFloating(to)) {
        // Float -> integer of values beyond the integer range is undefined on the CPU side.
        continue;
      }
      Pair dst = testing::OutputPair({5, 4, 6}, to);
      CCTUNE_ASSERT_OK(dst.cpu.CopyFrom(view.cpu));
      CCTUNE_ASSERT_OK(dst.gpu.CopyFrom(view.gpu));
      EXPECT_TRUE(AllEqual(dst.gpu, dst.cpu)) << DTypeName(from) << " -> " << DTypeName(to);
    }
  }
}

TEST_F(CudaDeviceTest, StridedCopyFloatToIntegerTruncates) {
  std::vector<float> v;
  for (int i = -40; i < 40; ++i) v.push_back(static_cast<float>(i) * 0.37f);
  v.push_back(0.f);
  v.push_back(-0.f);
  const int64_t n = static_cast<int64_t>(v.size());
  const Pair src = PairFrom(ValueOrDie(Tensor::FromVector(v, {n})));
  for (DType from : {DType::kF32, DType::kBF16, DType::kF16}) {
    const Pair typed = testing::ViewPair(src, [from](const Tensor& t) { return t.To(from); });
    for (DType to : {DType::kI32, DType::kI64, DType::kBool}) {
      Pair dst = testing::OutputPair({n}, to);
      CCTUNE_ASSERT_OK(dst.cpu.CopyFrom(typed.cpu));
      CCTUNE_ASSERT_OK(dst.gpu.CopyFrom(typed.gpu));
      EXPECT_TRUE(AllEqual(dst.gpu, dst.cpu)) << DTypeName(from) << " -> " << DTypeName(to);
    }
  }
}

TEST_F(CudaDeviceTest, StridedCopyIntoNonContiguousEightDims) {
  Generator gen(3);
  const Shape shape = {2, 1, 3, 2, 2, 1, 3, 2};
  const Pair src = testing::RandomPair(shape, DType::kF32, gen);
  const Pair rev = testing::ViewPair(src, [](const Tensor& t) {
    return t.Permute({7, 6, 5, 4, 3, 2, 1, 0});
  });
  for (DType to : {DType::kF32, DType::kBF16, DType::kF16}) {
    // Destination: every other element of a wider buffer, in the reversed shape.
    Pair wide = testing::OutputPair({2, 3, 1, 2, 2, 3, 1, 4}, to);
    Pair dst = testing::ViewPair(wide, [](const Tensor& t) { return t.Slice(7, 0, 4, 2); });
    CCTUNE_ASSERT_OK(dst.cpu.CopyFrom(rev.cpu));
    CCTUNE_ASSERT_OK(dst.gpu.CopyFrom(rev.gpu));
    EXPECT_TRUE(AllEqual(dst.gpu, dst.cpu)) << DTypeName(to);
    // The untouched odd elements keep their fill on both sides.
    EXPECT_TRUE(AllEqual(wide.gpu, wide.cpu)) << DTypeName(to);
  }
}

TEST_F(CudaDeviceTest, CopyWithinHandlesOverlap) {
  CCTUNE_ASSERT_OK_AND_ASSIGN(DeviceInterface * iface, GetDeviceInterface(DeviceType::kCUDA));
  std::vector<uint8_t> host(1024);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<uint8_t>(i * 7 + 3);
  CCTUNE_ASSERT_OK_AND_ASSIGN(void* p, iface->Allocate(0, host.size()));
  char* base = static_cast<char*>(p);
  CCTUNE_ASSERT_OK(iface->CopyFromHost(p, host.data(), host.size(), 0));
  // Forward overlap, backward overlap, then a disjoint copy, each checked against memmove.
  std::vector<uint8_t> expect = host;
  CCTUNE_ASSERT_OK(iface->CopyWithin(base + 16, base, 500, 0));
  std::memmove(expect.data() + 16, expect.data(), 500);
  CCTUNE_ASSERT_OK(iface->CopyWithin(base + 100, base + 140, 300, 0));
  std::memmove(expect.data() + 100, expect.data() + 140, 300);
  CCTUNE_ASSERT_OK(iface->CopyWithin(base + 900, base, 100, 0));
  std::memmove(expect.data() + 900, expect.data(), 100);
  std::vector<uint8_t> back(host.size());
  CCTUNE_ASSERT_OK(iface->CopyToHost(back.data(), p, back.size(), 0));
  CCTUNE_ASSERT_OK(iface->Synchronize(0));
  iface->Free(0, p, host.size());
  EXPECT_EQ(back, expect);
}

TEST_F(CudaDeviceTest, MemoryStatsCountCudaAllocations) {
  const Device cuda0 = Device::Cuda(0);
  const MemoryStats before = GetMemoryStats(cuda0);
  const MemoryStats cpu_before = GetMemoryStats(Device::Cpu());
  {
    CCTUNE_ASSERT_OK_AND_ASSIGN(Tensor a, Tensor::Empty({1000}, DType::kF32, cuda0));
    CCTUNE_ASSERT_OK_AND_ASSIGN(Tensor b, Tensor::Empty({3, 7}, DType::kBF16, cuda0));
    const MemoryStats during = GetMemoryStats(cuda0);
    EXPECT_EQ(during.current_bytes - before.current_bytes, 4000 + 42);
    EXPECT_EQ(during.num_allocations - before.num_allocations, 2);
    EXPECT_GE(during.peak_bytes, during.current_bytes);
    // Views share the storage: no new allocation.
    CCTUNE_ASSERT_OK_AND_ASSIGN(Tensor v, b.Transpose(0, 1));
    EXPECT_EQ(GetMemoryStats(cuda0).num_allocations, during.num_allocations);
  }
  const MemoryStats after = GetMemoryStats(cuda0);
  EXPECT_EQ(after.current_bytes, before.current_bytes);
  EXPECT_EQ(after.num_allocations, before.num_allocations);
  EXPECT_GE(after.peak_bytes, before.current_bytes + 4042);
  // None of it was charged to the CPU.
  EXPECT_EQ(GetMemoryStats(Device::Cpu()).current_bytes, cpu_before.current_bytes);
}

TEST_F(CudaDeviceTest, OutOfMemoryIsAStatusAndRecoverable) {
  CCTUNE_ASSERT_OK_AND_ASSIGN(DeviceInterface * iface, GetDeviceInterface(DeviceType::kCUDA));
  auto huge = iface->Allocate(0, size_t{1} << 60);
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted) << huge.status();
  EXPECT_NE(huge.status().message().find("cudaMalloc"), absl::string_view::npos) << huge.status();
  EXPECT_NE(huge.status().message().find("cuda:0"), absl::string_view::npos) << huge.status();
  // The failure must not leak into later work (the runtime's last-error slot is cleared).
  Generator gen(4);
  const Pair p = testing::RandomPair({33}, DType::kF32, gen);
  Pair out = testing::OutputPair({33}, DType::kF32);
  CCTUNE_ASSERT_OK(out.cpu.CopyFrom(p.cpu));
  CCTUNE_ASSERT_OK(out.gpu.CopyFrom(p.gpu));
  EXPECT_TRUE(AllEqual(out.gpu, out.cpu));
}

TEST_F(CudaDeviceTest, MissingDeviceIndexIsAnError) {
  CCTUNE_ASSERT_OK_AND_ASSIGN(DeviceInterface * iface, GetDeviceInterface(DeviceType::kCUDA));
  CCTUNE_ASSERT_OK_AND_ASSIGN(const int n, iface->DeviceCount());
  auto t = Tensor::Empty({4}, DType::kF32, Device::Cuda(n));
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument) << t.status();
  EXPECT_NE(t.status().message().find(absl::StrCat("cuda:", n)), absl::string_view::npos)
      << t.status();
}

#ifdef CCTUNE_WITH_CUDA
TEST_F(CudaDeviceTest, FreedBlocksAreReused) {
  CCTUNE_ASSERT_OK(cuda::EmptyCache(0));
  const cuda::AllocatorStats start = cuda::GetAllocatorStats(0);
  void* first = nullptr;
  {
    CCTUNE_ASSERT_OK_AND_ASSIGN(Tensor a, Tensor::Empty({1 << 18}, DType::kF32, Device::Cuda(0)));
    first = a.raw_data();
    EXPECT_GE(cuda::GetAllocatorStats(0).reserved_bytes, start.reserved_bytes + (1 << 20));
  }
  const cuda::AllocatorStats freed = cuda::GetAllocatorStats(0);
  EXPECT_GE(freed.cached_bytes, 1 << 20);
  {
    CCTUNE_ASSERT_OK_AND_ASSIGN(Tensor b, Tensor::Empty({1 << 18}, DType::kF32, Device::Cuda(0)));
    EXPECT_EQ(b.raw_data(), first);
    EXPECT_EQ(cuda::GetAllocatorStats(0).reserved_bytes, freed.reserved_bytes);
  }
  CCTUNE_ASSERT_OK(cuda::EmptyCache(0));
  EXPECT_EQ(cuda::GetAllocatorStats(0).cached_bytes, 0);
  EXPECT_EQ(cuda::GetAllocatorStats(0).reserved_bytes, freed.reserved_bytes - freed.cached_bytes);
}
#endif

}  // namespace
}  // namespace cctune
