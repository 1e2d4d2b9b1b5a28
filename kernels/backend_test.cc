// Backend lookup: the CPU backend is always there (no registration needed), a missing device
// backend is Unavailable naming the device, and a registered backend is found. A backend that
// implements only the forward ops still builds, and its training ops are Unimplemented.
#include "kernels/backend.h"

#include "gtest/gtest.h"

namespace cctune {
namespace {

TEST(BackendTest, CpuIsAlwaysAvailable) {
  absl::StatusOr<OpBackend*> cpu = GetOpBackend(DeviceType::kCPU);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  ASSERT_NE(*cpu, nullptr);
  EXPECT_EQ((*cpu)->type(), DeviceType::kCPU);
  EXPECT_EQ(*GetOpBackend(DeviceType::kCPU), *cpu);  // one instance
}

TEST(BackendTest, MetaHasNoBackend) {
  absl::StatusOr<OpBackend*> meta = GetOpBackend(DeviceType::kMeta);
  EXPECT_EQ(meta.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(meta.status().message().find("meta"), std::string::npos) << meta.status();
}

// A do-nothing backend standing in for CUDA.
class FakeCudaBackend final : public OpBackend {
 public:
  DeviceType type() const override { return DeviceType::kCUDA; }
  absl::Status Linear(Tensor&, const Tensor&, const Tensor&, const Tensor*) override {
    return absl::OkStatus();
  }
  absl::Status Matmul(Tensor&, const Tensor&, const Tensor&) override { return absl::OkStatus(); }
  absl::Status Embedding(Tensor&, const Tensor&, const Tensor&) override {
    return absl::OkStatus();
  }
  absl::Status RmsNorm(Tensor&, const Tensor&, const Tensor&, float) override {
    return absl::OkStatus();
  }
  absl::Status RopeCache(Tensor&, Tensor&, const Tensor&) override { return absl::OkStatus(); }
  absl::Status Rope(Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                    ops::RopePairing) override {
    return absl::OkStatus();
  }
  absl::Status SiluMul(Tensor&, const Tensor&, const Tensor&) override { return absl::OkStatus(); }
  absl::Status Softmax(Tensor&, const Tensor&) override { return absl::OkStatus(); }
  absl::Status Attention(Tensor&, const Tensor&, const Tensor&, const Tensor&,
                         const ops::AttentionOptions&) override {
    return absl::OkStatus();
  }
  absl::Status Add(Tensor&, const Tensor&, const Tensor&) override { return absl::OkStatus(); }
  absl::Status Mul(Tensor&, const Tensor&, const Tensor&) override { return absl::OkStatus(); }
  absl::Status Scale(Tensor&, const Tensor&, float) override { return absl::OkStatus(); }
  absl::Status Argmax(Tensor&, const Tensor&) override { return absl::OkStatus(); }
  absl::Status TopK(Tensor&, Tensor&, const Tensor&, int64_t) override { return absl::OkStatus(); }
  absl::Status Sample(Tensor&, const Tensor&, const ops::SamplingParams&, Generator&) override {
    return absl::OkStatus();
  }
};

TEST(BackendTest, MissingCudaIsUnavailableThenRegisteredIsFound) {
  // This test binary does not link //kernels/cuda and has no libcctune_cuda.so in its
  // runfiles, so nothing registers CUDA: the error names the library it tried to open.
  absl::StatusOr<OpBackend*> cuda = GetOpBackend(DeviceType::kCUDA);
  EXPECT_EQ(cuda.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(cuda.status().message().find("libcctune_cuda.so"), std::string::npos)
      << cuda.status();
  static FakeCudaBackend fake;
  RegisterOpBackend(&fake);
  cuda = GetOpBackend(DeviceType::kCUDA);
  ASSERT_TRUE(cuda.ok()) << cuda.status();
  EXPECT_EQ(*cuda, &fake);
  EXPECT_EQ((*GetOpBackend(DeviceType::kCPU))->type(), DeviceType::kCPU);
}

TEST(BackendTest, TrainingOpsDefaultToUnimplementedNamingOpAndDevice) {
  FakeCudaBackend fake;  // overrides none of the training ops
  Tensor t;
  EXPECT_EQ(fake.LinearBackward(&t, nullptr, nullptr, t, t, t).code(),
            absl::StatusCode::kUnimplemented);
  EXPECT_EQ(fake.LinearBackward(&t, nullptr, nullptr, t, t, t).message(),
            "LinearBackward is not implemented for cuda");
  EXPECT_EQ(fake.AttentionBackward(t, t, t, t, t, t, t, nullptr, nullptr, {}).message(),
            "AttentionBackward is not implemented for cuda");
  EXPECT_EQ(fake.CrossEntropyForward(t, t, nullptr, t, t, -100).message(),
            "CrossEntropyForward is not implemented for cuda");
  EXPECT_EQ(fake.AttentionWithLse(t, t, t, t, t, {}).message(),
            "AttentionWithLse is not implemented for cuda");
  // The CPU backend implements them all: an empty LinearBackward call succeeds.
  OpBackend* cpu = *GetOpBackend(DeviceType::kCPU);
  Tensor x = *Tensor::Zeros({0, 3}, DType::kF32), w = *Tensor::Zeros({2, 3}, DType::kF32);
  Tensor dy = *Tensor::Zeros({0, 2}, DType::kF32), dw = *Tensor::Zeros({2, 3}, DType::kF32);
  EXPECT_TRUE(cpu->LinearBackward(nullptr, &dw, nullptr, dy, x, w).ok());
}

}  // namespace
}  // namespace cctune
