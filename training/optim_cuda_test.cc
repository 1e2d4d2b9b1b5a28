// The optimizers over cuda:0 buffers against the same optimizers over CPU buffers: AdamW
// (an f32 buffer and a bf16 buffer with its f32 master copy) and SGD with momentum take the
// same steps with gradient clipping and ZeroGrad; states, parameters and gradient norms must
// agree to a few f32 roundings, and each bf16 parameter must be the exact rounding of its
// master copy. A state exported on cuda, saved with SaveRecipeState (device tensors copied to
// the host) and loaded into a fresh cuda optimizer, continues bit-identically to the run that
// never stopped (the CUDA kernels are deterministic). Skips without a usable CUDA device; on a
// machine without a GPU it runs under the emulator (kernels/cuda/emu/run_emu.sh):
//   CCTUNE_EMU_EXTRA="checkpoint data training" CCTUNE_EMU_TESTS="training/optim_cuda_test"
//     bash kernels/cuda/emu/run_emu.sh
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/random.h"
#include "core/tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_test_util.h"
#include "training/optim.h"
#include "training/recipe_state.h"

namespace cctune {
namespace {

using ::cctune::testing::AllClose;
using ::cctune::testing::AllEqual;
using ::testing::HasSubstr;

constexpr double kAtol = 2e-6, kRtol = 1e-5;

class OptimCudaTest : public ::testing::Test {
 protected:
  void SetUp() override { CCTUNE_SKIP_WITHOUT_CUDA(); }
};

Tensor OnCpu(const Tensor& t) { return ValueOrDie(t.To(Device::Cpu())); }

// (AllClose / AllEqual take the cuda tensor first, then the cpu one.)

// Two buffers ("w": f32 [n0], "h": bf16 [n1] used flat as [n1/5, 5]) on `device`, from
// fixed random values.
std::vector<ParamBuffer> MakeBuffers(const Device& device, int64_t n0, int64_t n1) {
  Generator gen(42);
  Tensor w = ValueOrDie(RandomNormal({n0}, DType::kF32, gen));
  Tensor h = ValueOrDie(RandomNormal({n1 / 5, 5}, DType::kBF16, gen));
  std::vector<ParamBuffer> b;
  b.push_back({"w", ValueOrDie(w.To(device)), ValueOrDie(Tensor::Zeros({n0}, DType::kF32, device))});
  b.push_back(
      {"h", ValueOrDie(h.To(device)), ValueOrDie(Tensor::Zeros({n1 / 5, 5}, DType::kF32, device))});
  return b;
}

// Fills every gradient with the same draws on both sides (the CPU copy is the source).
void SetGrads(Generator& gen, double scale, const std::vector<ParamBuffer>& cpu,
              const std::vector<ParamBuffer>& gpu) {
  for (size_t i = 0; i < cpu.size(); ++i) {
    Tensor g = ValueOrDie(Tensor::Empty(cpu[i].grad.shape(), DType::kF32));
    CCTUNE_CHECK_OK(FillNormal(g, 0.0, scale, gen));
    Tensor c = cpu[i].grad, d = gpu[i].grad;  // views of the buffers
    CCTUNE_CHECK_OK(c.CopyFrom(g));
    CCTUNE_CHECK_OK(d.CopyFrom(g));
  }
}

void ExpectSameState(const Optimizer& gpu, const Optimizer& cpu) {
  const OptimizerState g = gpu.ExportState(), c = cpu.ExportState();
  ASSERT_EQ(g.step, c.step);
  ASSERT_EQ(g.tensors.size(), c.tensors.size());
  for (const auto& [name, t] : c.tensors) {
    ASSERT_TRUE(g.tensors.at(name).device().is_cuda()) << name;
    EXPECT_TRUE(AllClose(g.tensors.at(name), t, kAtol, kRtol)) << name;
  }
  for (size_t i = 0; i < cpu.buffers().size(); ++i) {
    const Tensor& gp = gpu.buffers()[i].param;
    if (gp.dtype() == DType::kBF16) {
      const Tensor master = OnCpu(g.tensors.at(gpu.buffers()[i].name + ".master"));
      Tensor rounded = ValueOrDie(master.To(DType::kBF16));
      EXPECT_TRUE(AllEqual(ValueOrDie(gp.Reshape({gp.numel()})), rounded));
    } else {
      EXPECT_TRUE(AllClose(gp, cpu.buffers()[i].param, kAtol, kRtol));
    }
  }
}

TEST_F(OptimCudaTest, AdamWOnCudaMatchesCpuAndResumesFromASavedState) {
  const int64_t n0 = 40007, n1 = 16385 * 5;
  std::vector<ParamBuffer> cpu_b = MakeBuffers(Device::Cpu(), n0, n1);
  std::vector<ParamBuffer> gpu_b = MakeBuffers(Device::Cuda(0), n0, n1);
  AdamWOptions o;
  o.lr = 1e-2;
  o.weight_decay = 0.1;
  CCTUNE_ASSERT_OK_AND_ASSIGN(std::unique_ptr<AdamW> cpu, AdamW::Create(cpu_b, o));
  CCTUNE_ASSERT_OK_AND_ASSIGN(std::unique_ptr<AdamW> gpu, AdamW::Create(gpu_b, o));
  EXPECT_EQ(gpu->StateBytes(), cpu->StateBytes());
  Generator gen(7);
  const std::string path =
      absl::StrCat(::testing::TempDir(), "/optim_cuda_state_", getpid(), ".safetensors");
  std::unique_ptr<AdamW> resumed;  // from the state saved after step 1
  for (int step = 0; step < 5; ++step) {
    SCOPED_TRACE(absl::StrCat("step ", step));
    SetGrads(gen, step == 1 || step == 3 ? 5.0 : 0.05, cpu_b, gpu_b);  // steps 1, 3 clip
    if (resumed != nullptr) {
      for (size_t i = 0; i < gpu_b.size(); ++i) {
        Tensor grad = resumed->buffers()[i].grad;
        CCTUNE_ASSERT_OK(grad.CopyFrom(gpu_b[i].grad));
      }
    }
    CCTUNE_ASSERT_OK_AND_ASSIGN(const double cpu_norm, ClipGradNorm(cpu->Grads(), 1.0));
    CCTUNE_ASSERT_OK_AND_ASSIGN(const double gpu_norm, ClipGradNorm(gpu->Grads(), 1.0));
    EXPECT_NEAR(gpu_norm, cpu_norm, 1e-12 * cpu_norm);
    for (size_t i = 0; i < cpu_b.size(); ++i) {
      EXPECT_TRUE(AllClose(gpu_b[i].grad, cpu_b[i].grad, 0, 1e-6)) << cpu_b[i].name;
    }
    const double lr = o.lr * (1 - 0.1 * step);
    cpu->set_lr(lr);
    gpu->set_lr(lr);
    CCTUNE_ASSERT_OK(cpu->Step());
    CCTUNE_ASSERT_OK(gpu->Step());
    ExpectSameState(*gpu, *cpu);
    if (resumed != nullptr) {
      CCTUNE_ASSERT_OK_AND_ASSIGN(const double norm, ClipGradNorm(resumed->Grads(), 1.0));
      EXPECT_EQ(norm, gpu_norm);
      resumed->set_lr(lr);
      CCTUNE_ASSERT_OK(resumed->Step());
      for (size_t i = 0; i < gpu_b.size(); ++i) {
        EXPECT_TRUE(AllEqual(resumed->buffers()[i].param, OnCpu(gpu_b[i].param)))
            << gpu_b[i].name;
      }
      const OptimizerState a = resumed->ExportState(), b = gpu->ExportState();
      EXPECT_EQ(a.step, b.step);
      for (const auto& [name, t] : b.tensors) {
        EXPECT_TRUE(AllEqual(a.tensors.at(name), OnCpu(t))) << name;
      }
    }
    if (step == 1) {
      // Save the cuda state (device tensors, copied to the host by the writer), load it and
      // import it into a fresh cuda optimizer over the same parameter values.
      RecipeState state;
      state.proto.set_step(2);
      SetOptimizerState(gpu->ExportState(), &state);
      CCTUNE_ASSERT_OK(SaveRecipeState(path, state));
      CCTUNE_ASSERT_OK_AND_ASSIGN(RecipeState loaded, LoadRecipeState(path));
      CCTUNE_ASSERT_OK_AND_ASSIGN(OptimizerState os, GetOptimizerState(loaded));
      std::vector<ParamBuffer> copy = MakeBuffers(Device::Cuda(0), n0, n1);
      CCTUNE_ASSERT_OK(copy[0].param.CopyFrom(gpu_b[0].param));  // bf16: from the masters
      CCTUNE_ASSERT_OK_AND_ASSIGN(resumed, AdamW::Create(copy, AdamWOptions{}));
      CCTUNE_ASSERT_OK(resumed->ImportState(os));
      EXPECT_EQ(resumed->step(), 2);
      EXPECT_EQ(resumed->lr(), gpu->lr());
      EXPECT_TRUE(AllEqual(copy[1].param, OnCpu(gpu_b[1].param)));
    }
  }
  std::remove(path.c_str());
  CCTUNE_ASSERT_OK(gpu->ZeroGrad());
  for (const ParamBuffer& b : gpu_b) {
    EXPECT_TRUE(AllEqual(b.grad, ValueOrDie(Tensor::Zeros(b.grad.shape(), DType::kF32))));
  }
}

TEST_F(OptimCudaTest, SgdWithMomentumOnCudaMatchesCpu) {
  for (const bool nesterov : {false, true}) {
    SCOPED_TRACE(nesterov ? "nesterov" : "momentum");
    std::vector<ParamBuffer> cpu_b = MakeBuffers(Device::Cpu(), 1001, 16385 * 5);
    std::vector<ParamBuffer> gpu_b = MakeBuffers(Device::Cuda(0), 1001, 16385 * 5);
    SgdOptions o;
    o.lr = 0.05;
    o.momentum = 0.9;
    o.weight_decay = 0.01;
    o.dampening = nesterov ? 0 : 0.1;
    o.nesterov = nesterov;
    CCTUNE_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Sgd> cpu, Sgd::Create(cpu_b, o));
    CCTUNE_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Sgd> gpu, Sgd::Create(gpu_b, o));
    Generator gen(3);
    for (int step = 0; step < 3; ++step) {
      SCOPED_TRACE(absl::StrCat("step ", step));
      SetGrads(gen, 1.0, cpu_b, gpu_b);
      CCTUNE_ASSERT_OK(cpu->Step());
      CCTUNE_ASSERT_OK(gpu->Step());
      ExpectSameState(*gpu, *cpu);
    }
  }
}

TEST_F(OptimCudaTest, RejectsBuffersOnTwoDevices) {
  std::vector<ParamBuffer> b = MakeBuffers(Device::Cuda(0), 10, 10);
  b[1].grad = ValueOrDie(Tensor::Zeros({2, 5}, DType::kF32));
  EXPECT_THAT(std::string(AdamW::Create(b, {}).status().message()),
              HasSubstr("buffer 'h': param is on cuda:0 and grad on cpu"));
  b = MakeBuffers(Device::Cuda(0), 10, 10);
  b[0] = MakeBuffers(Device::Cpu(), 10, 10)[0];
  EXPECT_THAT(std::string(Sgd::Create(b, {}).status().message()),
              HasSubstr("must be on one device (cpu, the first param's)"));
}

}  // namespace
}  // namespace cctune
