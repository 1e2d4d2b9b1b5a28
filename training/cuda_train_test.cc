// Training on cuda:0 against the same training on the CPU: tiny GQA decoders (untied; tied with
// activation checkpointing and packed sequences; LoRA adapters only; bf16 parameters with f32
// master copies) start from the same weights and take the same AdamW steps (two micro-batches
// each, gradient clipping) on the same data on both devices. The per-step losses and gradient
// norms and the final weights must agree within the tolerances explained at kF32 / kBf16. A
// checkpoint taken on cuda mid-run (weights and optimizer state written to a safetensors file
// from the device, read back onto a fresh cuda model) continues like the run that never stopped.
//
// Skips without a usable CUDA device. An op the CUDA backend lacks shows up as a failure
// naming it ("... is not implemented for cuda"). On a machine without a GPU the same test runs
// under the emulator (kernels/cuda/emu/run_emu.sh), as one command line:
//   CCTUNE_EMU_EXTRA="checkpoint modules models/... training"
//   CCTUNE_EMU_TESTS="training/cuda_train_test" bash kernels/cuda/emu/run_emu.sh
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/safetensors.h"
#include "core/device_interface.h"
#include "core/random.h"
#include "core/status.h"
#include "core/tensor.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cuda_test_util.h"
#include "models/decoder_builder.h"
#include "models/lora.h"
#include "modules/parameters.h"
#include "modules/transformer_decoder.h"
#include "training/decoder_trainer.h"
#include "training/optim.h"
#include "training/train_step.h"

namespace cctune {
namespace {

struct Variant {
  const char* name;
  bool tied = false;
  bool lora = false;
  bool checkpointing = false;
  bool packed = false;
  DType dtype = DType::kF32;
};

// Tolerances. The two devices run the same algorithm with different f32 summation orders
// (cuBLAS vs the CPU GEMM, parallel reductions in the norms, softmax and attention), so each
// activation and gradient differs by a few f32 ulps relative to its magnitude (~1e-7; the
// emulator measured <= 1e-7 on loss, norm and weights). The loss is a sum of such terms:
// 1e-5 relative covers it with room, and each step's gradients must agree to 1e-5 of the
// gradient norm. AdamW divides the update by sqrt(v), so a gradient error e moves an update
// of size ~lr by about lr·e/|g|: the final weights differ by far less than 1e-3·lr (a broken
// kernel moves them by ~lr per step, 1000x more). One exception is inherent to Adam: a
// gradient that is nearly zero (|g| below the error) can change sign between devices, and its
// first update is then +lr on one and -lr on the other. Such elements are rare (a few in the
// ~5k of a tiny model) and bounded: Adam moves a weight by at most ~lr (|m̂|/sqrt(v̂) <= ~1 for
// the first steps) plus lr·weight_decay·|w| per step, so they may reach 2.1·lr·kSteps apart.
// At most kMaxOutliers of the elements may be outside the tight tolerance, none outside that
// bound.
struct Tolerance {
  double loss_rtol;       // per-step loss and gradient norm, relative
  double grad_rtol;       // per-step gradients, relative to the step's gradient norm
  double weight_atol;     // final weights
  double weight_rtol;
};
constexpr double kLr = 1e-3;
constexpr int kSteps = 3;
constexpr double kMaxOutliers = 0.01;  // fraction of the trained elements
constexpr Tolerance kF32 = {1e-5, 1e-5, 1e-3 * kLr, 1e-5};
// bf16 parameters: both devices read the same bf16 weights, but the CUDA forward Linear rounds
// its f32 input to bf16 GEMM operands (kernels/cuda/cuda_backend.cc) while the CPU one keeps
// it in f32 (kernels/cpu/linear.cc), so activations and gradients differ by up to a bf16 rounding (2^-8 relative); the loss
// and norm, means over many terms, stay within 1e-3 relative and each gradient within 2e-3
// of the norm (half a bf16 rounding step; the emulator measured 2.3e-4). Weights written back
// are f32 masters rounded to bf16, so masters that sit near a rounding boundary may land one
// bf16 step (2^-8 relative) apart.
constexpr Tolerance kBf16 = {1e-3, 2e-3, 1e-3 * kLr, 1.0 / 128};

DecoderConfig TinyGqaConfig(bool tied) {
  DecoderConfig c;
  c.vocab_size = 29;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;  // GQA
  c.embed_dim = 16;
  c.head_dim = 4;
  c.intermediate_dim = 24;
  c.max_seq_len = 16;
  c.tie_word_embeddings = tied;
  return c;
}

LoRAOptions TinyLoRA() {
  LoRAOptions o;
  o.lora_attn_modules = {"q_proj", "k_proj", "v_proj", "output_proj"};
  o.apply_lora_to_mlp = true;
  o.apply_lora_to_output = true;
  o.lora_rank = 3;
  o.lora_alpha = 6.0;
  return o;
}

absl::StatusOr<std::unique_ptr<TransformerDecoder>> Build(const Variant& v) {
  const DecoderConfig config = TinyGqaConfig(v.tied);
  if (v.lora) return BuildLoRADecoder(config, TinyLoRA());
  return BuildDecoder(config);
}

// A model with its gradient arena, trainer and AdamW on one device.
struct Trainee {
  std::unique_ptr<TransformerDecoder> decoder;
  ParameterArena params;
  ParameterArena grads;
  std::unique_ptr<DecoderTrainer> trainer;
  std::unique_ptr<AdamW> opt;
};

absl::StatusOr<std::unique_ptr<Trainee>> MakeTrainee(const Variant& v, const StateDict& init,
                                                     const Device& device) {
  auto t = std::make_unique<Trainee>();
  CCTUNE_ASSIGN_OR_RETURN(t->decoder, Build(v));
  CCTUNE_ASSIGN_OR_RETURN(t->params, ParameterArena::Create(*t->decoder, v.dtype, device));
  CCTUNE_RETURN_IF_ERROR(t->params.LoadStateDict(init).status());
  ParameterLayout grad_layout;
  if (v.lora) {
    CCTUNE_ASSIGN_OR_RETURN(grad_layout, LoRATrainableLayout(*t->decoder));
  } else {
    grad_layout = t->params.layout().WithDType(DType::kF32);
  }
  CCTUNE_ASSIGN_OR_RETURN(t->grads, ParameterArena::Allocate(grad_layout, device));
  DecoderTrainerOptions to;
  to.activation_checkpointing = v.checkpointing;
  to.frozen_if_missing = v.lora;
  to.logits_chunk_rows = 5;  // several chunks per micro-batch: the loss adds up on the device
  CCTUNE_ASSIGN_OR_RETURN(t->trainer, DecoderTrainer::Create(t->decoder.get(), &t->grads, to));
  std::vector<ParamBuffer> buffers;
  if (v.lora) {
    CCTUNE_ASSIGN_OR_RETURN(buffers, LoRAParamBuffers(t->params, t->grads));
  } else {
    CCTUNE_ASSIGN_OR_RETURN(buffers, ArenaParamBuffers(t->params, t->grads));
  }
  AdamWOptions ao;
  ao.lr = kLr;
  ao.weight_decay = 0.01;
  CCTUNE_ASSIGN_OR_RETURN(t->opt, AdamW::Create(std::move(buffers), ao));
  return t;
}

// The initial weights, on the host, in f32 (each trainee converts to its dtype, so bf16
// trainees on both devices start from the same rounded values). LoRA's lora_b starts at zero
// in torchtune; here it is random too, so lora_a gets a gradient from the first step.
absl::StatusOr<StateDict> InitialWeights(const Variant& v, uint64_t seed) {
  CCTUNE_ASSIGN_OR_RETURN(std::unique_ptr<TransformerDecoder> d, Build(v));
  CCTUNE_ASSIGN_OR_RETURN(ParameterArena arena,
                          ParameterArena::Create(*d, DType::kF32, Device::Cpu()));
  Generator gen(seed);
  CCTUNE_RETURN_IF_ERROR(arena.InitializeRandom(gen));
  StateDict out;
  for (const auto& [name, view] : arena.named_tensors()) {
    CCTUNE_ASSIGN_OR_RETURN(Tensor t, view.Clone());
    if (v.lora && name.find("lora_b") != std::string::npos) {
      CCTUNE_RETURN_IF_ERROR(FillNormal(t, 0.0, 0.1, gen));
    }
    out.emplace(name, std::move(t));
  }
  return out;
}

// Random next-token micro-batches on the host (as the data loader makes them); some labels
// are -100. Packed: each row holds two documents (block-causal mask, positions restarting).
MicroBatch MakeBatch(int64_t b, int64_t s, int64_t vocab, bool packed, Generator& gen) {
  std::vector<int64_t> tokens(b * s), labels(b * s), pos(b * s);
  std::vector<uint8_t> mask(b * s * s, 0);
  const int64_t split = s / 2 - 1;
  for (int64_t r = 0; r < b; ++r) {
    for (int64_t i = 0; i < s; ++i) {
      tokens[r * s + i] = static_cast<int64_t>(gen.UniformInt(vocab));
      labels[r * s + i] =
          gen.UniformInt(5) == 0 ? -100 : static_cast<int64_t>(gen.UniformInt(vocab));
      const bool second = packed && i >= split;
      pos[r * s + i] = second ? i - split : i;
      for (int64_t j = 0; j <= i; ++j) {
        const bool same_doc = !packed || ((j >= split) == second);
        mask[(r * s + i) * s + j] = same_doc ? 1 : 0;
      }
    }
  }
  MicroBatch mb;
  mb.tokens = ValueOrDie(Tensor::FromVector(tokens, {b, s}));
  mb.labels = ValueOrDie(Tensor::FromVector(labels, {b, s}));
  if (packed) {
    Tensor m = ValueOrDie(Tensor::Empty({b, s, s}, DType::kBool));
    std::copy(mask.begin(), mask.end(), static_cast<uint8_t*>(m.raw_data()));
    mb.mask = m;
    mb.input_pos = ValueOrDie(Tensor::FromVector(pos, {b, s}));
  }
  return mb;
}

std::vector<std::vector<MicroBatch>> MakeSteps(const Variant& v, int steps, uint64_t seed) {
  Generator gen(seed);
  std::vector<std::vector<MicroBatch>> out(steps);
  for (auto& step : out) {
    for (int m = 0; m < 2; ++m) {
      step.push_back(MakeBatch(2, 12, TinyGqaConfig(v.tied).vocab_size, v.packed, gen));
    }
  }
  return out;
}

// Largest |a - b| over the arenas' named tensors, with the name, and whether all are within
// atol + rtol·|cpu|.
struct Compare {
  int64_t numel = 0;
  double max_abs = 0;
  std::string worst;       // "name[i] cuda x cpu y"
  std::string worst_name;  // name and index of that element
  size_t worst_index = 0;
  int64_t num_bad = 0;     // elements outside the tolerance
  bool ok = true;
};
Compare CompareArenas(const ParameterArena& gpu, const ParameterArena& cpu, double atol,
                      double rtol) {
  Compare c;
  for (const auto& [name, cv] : cpu.named_tensors()) {
    const std::vector<double> a = ValueOrDie(ValueOrDie(gpu.Get(name)).ToDoubleVector());
    const std::vector<double> b = ValueOrDie(cv.ToDoubleVector());
    c.numel += static_cast<int64_t>(a.size());
    for (size_t i = 0; i < a.size(); ++i) {
      const double d = std::fabs(a[i] - b[i]);
      if (!(d <= atol + rtol * std::fabs(b[i]))) {
        c.ok = false;
        ++c.num_bad;
      }
      if (!(d <= c.max_abs)) {
        c.max_abs = d;
        c.worst = absl::StrCat(name, "[", i, "] cuda ", a[i], " cpu ", b[i]);
        c.worst_name = name;
        c.worst_index = i;
      }
    }
  }
  return c;
}

class CudaTrainTest : public ::testing::TestWithParam<Variant> {};

TEST_P(CudaTrainTest, MatchesCpuStepByStep) {
  CCTUNE_SKIP_WITHOUT_CUDA();
  const Variant v = GetParam();
  const Tolerance tol = v.dtype == DType::kBF16 ? kBf16 : kF32;
  CCTUNE_ASSERT_OK_AND_ASSIGN(const StateDict init, InitialWeights(v, 11));
  CCTUNE_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Trainee> cpu,
                              MakeTrainee(v, init, Device::Cpu()));
  CCTUNE_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Trainee> gpu,
                              MakeTrainee(v, init, Device::Cuda(0)));
  ASSERT_TRUE(gpu->params.buffers()[0].device().is_cuda());
  ASSERT_TRUE(gpu->grads.buffers()[0].device().is_cuda());
  {  // identical starting weights
    const Compare c = CompareArenas(gpu->params, cpu->params, 0, 0);
    ASSERT_TRUE(c.ok) << c.worst;
  }
  const auto steps = MakeSteps(v, kSteps, 12);
  double max_loss_rel = 0, max_norm_rel = 0, max_grad_diff = 0;
  // Each step's (clipped) gradients, kept to explain a weight that ends up too far apart.
  std::vector<ParameterArena> cpu_grads, gpu_grads;
  for (int s = 0; s < kSteps; ++s) {
    CCTUNE_ASSERT_OK_AND_ASSIGN(TrainStepResult rc,
                                TrainStep(*cpu->trainer, *cpu->opt, steps[s], 1.0));
    absl::StatusOr<TrainStepResult> rg = TrainStep(*gpu->trainer, *gpu->opt, steps[s], 1.0);
    ASSERT_TRUE(rg.ok()) << v.name << " step " << s << " on cuda: " << rg.status();
    EXPECT_EQ(rg->num_tokens, rc.num_tokens);
    const double loss_rel = std::fabs(rg->loss - rc.loss) / rc.loss;
    const double norm_rel = std::fabs(rg->grad_norm - rc.grad_norm) / rc.grad_norm;
    max_loss_rel = std::max(max_loss_rel, loss_rel);
    max_norm_rel = std::max(max_norm_rel, norm_rel);
    EXPECT_LE(loss_rel, tol.loss_rtol)
        << v.name << " step " << s << ": loss cuda " << rg->loss << " cpu " << rc.loss;
    EXPECT_LE(norm_rel, tol.loss_rtol) << v.name << " step " << s << ": grad norm cuda "
                                       << rg->grad_norm << " cpu " << rc.grad_norm;
    for (auto [from, to] : {std::make_pair(&cpu->grads, &cpu_grads),
                            std::make_pair(&gpu->grads, &gpu_grads)}) {
      CCTUNE_ASSERT_OK_AND_ASSIGN(ParameterArena copy,
                                  ParameterArena::Allocate(from->layout(), Device::Cpu()));
      CCTUNE_ASSERT_OK(copy.LoadStateDict(from->ExportStateDict()).status());
      to->push_back(std::move(copy));
    }
    double norm_sq = 0;
    for (const auto& [name, g] : cpu_grads.back().named_tensors()) {
      for (double x : ValueOrDie(g.ToDoubleVector())) norm_sq += x * x;
    }
    const Compare g = CompareArenas(gpu_grads.back(), cpu_grads.back(),
                                    tol.grad_rtol * std::sqrt(norm_sq), 0);
    max_grad_diff = std::max(max_grad_diff, g.max_abs / std::sqrt(norm_sq));
    EXPECT_TRUE(g.ok) << v.name << " step " << s << ": " << g.num_bad
                      << " gradients differ by more than " << tol.grad_rtol
                      << " of the norm; worst " << g.worst;
  }
  const Compare w = CompareArenas(gpu->params, cpu->params, tol.weight_atol, tol.weight_rtol);
  const Compare bound =
      CompareArenas(gpu->params, cpu->params, 2.1 * kLr * kSteps, tol.weight_rtol);
  EXPECT_TRUE(bound.ok) << v.name << ": " << bound.num_bad
                        << " final weights differ by more than Adam can move them; worst "
                        << bound.worst;
  // Trained elements: the gradient arena's (frozen base weights must match exactly anyway).
  int64_t trained = 0;
  for (const Tensor& b : cpu->grads.buffers()) trained += b.numel();
  std::string history;
  if (!w.ok && cpu->grads.layout().Find(w.worst_name) != nullptr) {
    history = absl::StrCat(" (", w.worst_name, "[", w.worst_index, "]:");
    for (int s = 0; s < kSteps; ++s) {
      const double gc = ValueOrDie(ValueOrDie(cpu_grads[s].Get(w.worst_name)).ToDoubleVector())
          [w.worst_index];
      const double gg = ValueOrDie(ValueOrDie(gpu_grads[s].Get(w.worst_name)).ToDoubleVector())
          [w.worst_index];
      absl::StrAppend(&history, " step ", s, " grad cuda ", gg, " cpu ", gc,
                      s + 1 < kSteps ? ";" : ")");
    }
  }
  EXPECT_LE(w.num_bad, kMaxOutliers * trained)
      << v.name << ": " << w.num_bad << " of " << trained
      << " trained weights differ beyond the tolerance; worst " << w.worst << ";" << history;
  // The weights did move (by ~lr per step), so the comparison above is not vacuous.
  CCTUNE_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Trainee> start,
                              MakeTrainee(v, init, Device::Cpu()));
  const Compare moved = CompareArenas(cpu->params, start->params, 0, 0);
  EXPECT_GT(moved.max_abs, 0.5 * kLr) << v.name;
  if (v.lora) {  // the frozen base weights did not move on cuda
    for (const auto& [name, t] : gpu->params.named_tensors()) {
      if (IsLoRAParameter(name)) continue;
      EXPECT_EQ(ValueOrDie(t.ToDoubleVector()),
                ValueOrDie(ValueOrDie(start->params.Get(name)).ToDoubleVector()))
          << name << " is frozen but changed on cuda";
    }
  }
  std::printf("[ %s ] cuda vs cpu over %d steps: max loss rel diff %.3g, max grad-norm rel "
              "diff %.3g, max grad diff / norm %.3g, max |weight diff| %.3g (%s), %lld of "
              "%lld trained weights outside the tight tolerance%s\n",
              v.name, kSteps, max_loss_rel, max_norm_rel, max_grad_diff, w.max_abs,
              w.worst.c_str(), static_cast<long long>(w.num_bad),
              static_cast<long long>(trained), history.c_str());
}

INSTANTIATE_TEST_SUITE_P(
    Variants, CudaTrainTest,
    ::testing::Values(Variant{"gqa_untied_f32"},
                      Variant{"gqa_tied_ckpt_packed_f32", /*tied=*/true, /*lora=*/false,
                              /*checkpointing=*/true, /*packed=*/true},
                      Variant{"lora_f32", /*tied=*/false, /*lora=*/true},
                      Variant{"gqa_untied_bf16", /*tied=*/false, /*lora=*/false,
                              /*checkpointing=*/false, /*packed=*/false, DType::kBF16}),
    [](const ::testing::TestParamInfo<Variant>& info) { return std::string(info.param.name); });

// A checkpoint written from cuda (weights and AdamW state, copied to the host by the
// safetensors writer) and loaded onto a fresh cuda model continues the run: after one more
// step it matches the run that never stopped.
TEST(CudaTrainResumeTest, SaveOnCudaResumeOnCuda) {
  CCTUNE_SKIP_WITHOUT_CUDA();
  const Variant v{"gqa_untied_f32"};
  CCTUNE_ASSERT_OK_AND_ASSIGN(const StateDict init, InitialWeights(v, 21));
  CCTUNE_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Trainee> run,
                              MakeTrainee(v, init, Device::Cuda(0)));
  const auto steps = MakeSteps(v, 3, 22);
  for (int s = 0; s < 2; ++s) {
    CCTUNE_ASSERT_OK(TrainStep(*run->trainer, *run->opt, steps[s], 1.0).status());
  }
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = tmp != nullptr ? tmp : "/tmp";
  const std::string weights = dir + "/cuda_train_test_weights.safetensors";
  const std::string opt_file = dir + "/cuda_train_test_optimizer.safetensors";
  const OptimizerState saved = run->opt->ExportState();
  CCTUNE_ASSERT_OK(SaveSafetensors(weights, run->params.ExportStateDict()));
  CCTUNE_ASSERT_OK(SaveSafetensors(opt_file, saved.tensors));

  CCTUNE_ASSERT_OK_AND_ASSIGN(std::unique_ptr<Trainee> resumed,
                              MakeTrainee(v, init, Device::Cuda(0)));
  CCTUNE_ASSERT_OK_AND_ASSIGN(SafetensorsFile wf, SafetensorsFile::Open(weights));
  CCTUNE_ASSERT_OK_AND_ASSIGN(StateDict w, wf.LoadAll());
  CCTUNE_ASSERT_OK(resumed->params.LoadStateDict(w).status());
  CCTUNE_ASSERT_OK_AND_ASSIGN(SafetensorsFile of, SafetensorsFile::Open(opt_file));
  OptimizerState loaded;
  loaded.name = saved.name;
  loaded.step = saved.step;
  loaded.hyperparameters = saved.hyperparameters;
  CCTUNE_ASSERT_OK_AND_ASSIGN(loaded.tensors, of.LoadAll());
  CCTUNE_ASSERT_OK(resumed->opt->ImportState(loaded));
  ASSERT_EQ(resumed->opt->step(), 2);

  CCTUNE_ASSERT_OK_AND_ASSIGN(TrainStepResult a,
                              TrainStep(*run->trainer, *run->opt, steps[2], 1.0));
  CCTUNE_ASSERT_OK_AND_ASSIGN(TrainStepResult b,
                              TrainStep(*resumed->trainer, *resumed->opt, steps[2], 1.0));
  // Same device, same kernels, same state: equal unless a kernel is non-deterministic (e.g.
  // atomics in a scatter-add); allow a few f32 ulps for that, far below any state mix-up.
  EXPECT_NEAR(b.loss, a.loss, 1e-6 * a.loss);
  const Compare c = CompareArenas(resumed->params, run->params, 1e-6 * kLr, 1e-6);
  EXPECT_TRUE(c.ok) << "resumed run differs; worst " << c.worst;
  std::printf("[ resume ] cuda resumed vs uninterrupted: max |weight diff| %.3g\n", c.max_abs);
}

}  // namespace
}  // namespace cctune
