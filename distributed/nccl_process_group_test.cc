// The "nccl" backend on one GPU: a world of one (NCCL allows one rank per GPU, and the GPU
// machine has one), opened through CreateProcessGroup as recipes do (libcctune_nccl.so by
// dlopen). Every collective and dtype against the CPU copy, started collectives, bad
// arguments. Skips without a CUDA device, or when the machine has no libnccl.so.2, saying so.
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "core/random.h"
#include "core/tensor.h"
#include "distributed/process_group.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_test_util.h"

namespace cctune {
namespace {

using ::testing::HasSubstr;
using ::cctune::testing::AllClose;
using ::cctune::testing::AllEqual;
using ::cctune::testing::Pair;
using ::cctune::testing::RandomIntPair;
using ::cctune::testing::RandomPair;

class NcclProcessGroupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CCTUNE_SKIP_WITHOUT_CUDA();
    ProcessGroupOptions options;
    options.backend = "nccl";
    options.timeout_seconds = 60;
    auto pg = CreateProcessGroup(DistributedEnv{}, options, Device::Cuda(0));
    if (!pg.ok() && absl::StrContains(pg.status().message(), "libnccl.so")) {
      GTEST_SKIP() << "no NCCL on this machine: " << pg.status().message();
    }
    ASSERT_TRUE(pg.ok()) << pg.status();
    pg_ = std::move(*pg);
  }

  Pair Random(int64_t n, DType dtype) {
    if (IsFloating(dtype)) return RandomPair({n}, dtype, gen_);
    return RandomIntPair({n}, dtype, -1000, 1000, gen_);
  }

  std::unique_ptr<ProcessGroup> pg_;
  Generator gen_{17};
};

constexpr DType kDTypes[] = {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64};

TEST_F(NcclProcessGroupTest, AWorldOfOne) {
  EXPECT_STREQ(pg_->backend(), "nccl");
  EXPECT_EQ(pg_->rank(), 0);
  EXPECT_EQ(pg_->world_size(), 1);
}

TEST_F(NcclProcessGroupTest, EveryCollectiveAndDTypeKeepsTheValues) {
  for (DType dtype : kDTypes) {
    for (int64_t n : {1, 7, 4097}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAvg}) {
        if (!IsFloating(dtype) && op == ReduceOp::kAvg) continue;
        Pair p = Random(n, dtype);
        ASSERT_TRUE(pg_->AllReduce(p.gpu, op).ok()) << DTypeName(dtype) << " " << ReduceOpName(op);
        if (op == ReduceOp::kAvg) {
          EXPECT_TRUE(AllClose(p.gpu, p.cpu, 0, 1e-6)) << DTypeName(dtype);
        } else {
          EXPECT_TRUE(AllEqual(p.gpu, p.cpu)) << DTypeName(dtype) << " " << ReduceOpName(op);
        }
      }
      Pair in = Random(n, dtype);
      auto out = Tensor::Zeros({n}, dtype, Device::Cuda(0));
      ASSERT_TRUE(out.ok());
      ASSERT_TRUE(pg_->AllGather(in.gpu, *out).ok());
      EXPECT_TRUE(AllEqual(*out, in.cpu)) << "all_gather " << DTypeName(dtype);
      ASSERT_TRUE(pg_->ReduceScatter(in.gpu, *out, ReduceOp::kSum).ok());
      EXPECT_TRUE(AllEqual(*out, in.cpu)) << "reduce_scatter " << DTypeName(dtype);
      Pair b = Random(n, dtype);
      ASSERT_TRUE(pg_->Broadcast(b.gpu, 0).ok());
      EXPECT_TRUE(AllEqual(b.gpu, b.cpu)) << "broadcast " << DTypeName(dtype);
    }
  }
  EXPECT_TRUE(pg_->Barrier().ok());
}

TEST_F(NcclProcessGroupTest, StartedCollectivesCompleteInAnyOrder) {
  std::vector<Pair> inputs;
  std::vector<Tensor> outputs;
  std::vector<std::unique_ptr<Work>> works;
  for (int i = 0; i < 4; ++i) {
    inputs.push_back(Random(100003, DType::kBF16));
    auto out = Tensor::Zeros({100003}, DType::kBF16, Device::Cuda(0));
    ASSERT_TRUE(out.ok());
    outputs.push_back(*out);
    auto work = i % 2 == 0 ? pg_->StartAllGather(inputs[i].gpu, outputs[i])
                           : pg_->StartReduceScatter(inputs[i].gpu, outputs[i], ReduceOp::kSum);
    ASSERT_TRUE(work.ok()) << work.status();
    works.push_back(std::move(*work));
  }
  for (int i = 3; i >= 0; --i) {
    ASSERT_TRUE(works[i]->Wait().ok()) << i;
    EXPECT_TRUE(AllEqual(outputs[i], inputs[i].cpu)) << i;
  }
}

TEST_F(NcclProcessGroupTest, BadArgumentsNameTheDevice) {
  auto cpu = Tensor::Zeros({4}, DType::kF32);
  ASSERT_TRUE(cpu.ok());
  absl::Status s = pg_->AllReduce(*cpu, ReduceOp::kSum);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("tensors must be contiguous and on cuda:0 (this one is on cpu)"));
  auto gpu = Tensor::Zeros({4}, DType::kF32, Device::Cuda(0));
  ASSERT_TRUE(gpu.ok());
  EXPECT_THAT(pg_->Broadcast(*gpu, 1).message(), HasSubstr("root rank 1 is not in a world of 1"));
  auto big = Tensor::Zeros({5}, DType::kF32, Device::Cuda(0));
  ASSERT_TRUE(big.ok());
  EXPECT_THAT(pg_->AllGather(*gpu, *big).message(), HasSubstr("per-rank tensor has 4 f32"));
  EXPECT_TRUE(pg_->Barrier().ok());  // still usable
}

// Runs everywhere: CreateProcessGroup opens libcctune_nccl.so (no CUDA call yet), whose
// static initialiser registers "nccl" in this binary's registry (-rdynamic), and the
// backend refuses a CPU device by name.
TEST(NcclProcessGroupNoDeviceTest, TheLibraryRegistersAndACpuDeviceIsAClearError) {
  ProcessGroupOptions options;
  options.backend = "nccl";
  auto pg = CreateProcessGroup(DistributedEnv{}, options, Device::Cpu());
  ASSERT_FALSE(pg.ok());
  if (absl::StrContains(pg.status().message(), "libnccl.so")) {
    GTEST_SKIP() << "no NCCL on this machine: " << pg.status().message();
  }
  EXPECT_THAT(pg.status().message(),
              HasSubstr("process group backend \"nccl\" needs a cuda device, got cpu"));
}

}  // namespace
}  // namespace cctune
