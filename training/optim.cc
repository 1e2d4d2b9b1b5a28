#include "training/optim.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/dtype.h"
#include "core/status.h"

namespace cctune {
namespace {

// Loops shorter than this stay on one thread (the fork/join would cost more than it saves).
constexpr int64_t kParallelThreshold = 1 << 15;
// Work is split into fixed chunks of this many elements: reductions (GradNorm) then sum in
// the same order for any thread count.
constexpr int64_t kChunk = 1 << 14;

absl::Status CheckHyper(const char* who, const char* key, double v, bool ok,
                        const char* requirement) {
  if (ok && std::isfinite(v)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(who, ": ", key, " (", v, ") must be ", requirement));
}

// a * b + c with one rounding where the CPU has FMA (as torch's vectorized kernels compute
// `x.add(y, alpha=a)`), two roundings otherwise.
inline float Fma(float a, float b, float c) {
#if defined(__FMA__)
  return std::fma(a, b, c);
#else
  return a * b + c;
#endif
}

// Runs fn(begin, end) over fixed chunks of [0, n), on all cores when n is large. Each
// chunk's loop is a plain SIMD loop (branch-free: choices are template parameters).
template <typename Fn>
void ForChunks(int64_t n, const Fn& fn) {
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n > kParallelThreshold)
  for (int64_t c = 0; c < chunks; ++c) fn(c * kChunk, std::min(n, (c + 1) * kChunk));
}

struct AdamWScalars {
  float decay, step_size, bc2_sqrt, w1, beta2, w2, eps;
};

// One AdamW update of [0, n): p is the f32 parameter or master copy; out, when not null,
// receives the bf16 rounding of the updated p.
template <bool kLerpLow>
void AdamWKernel(float* __restrict p, const float* __restrict g, float* __restrict m,
                 float* __restrict v, bf16* __restrict out, int64_t n, const AdamWScalars& s) {
  const float decay = s.decay, step_size = s.step_size, bc2_sqrt = s.bc2_sqrt, w1 = s.w1;
  const float beta2 = s.beta2, w2 = s.w2, eps = s.eps;
#pragma omp simd
  for (int64_t k = 0; k < n; ++k) {
    const float gk = g[k];
    // torch's lerp picks its formula by the weight.
    const float mk = kLerpLow ? m[k] + w1 * (gk - m[k]) : gk - (gk - m[k]) * (1.0f - w1);
    const float vk = v[k] * beta2 + w2 * gk * gk;
    const float denom = std::sqrt(vk) / bc2_sqrt + eps;
    m[k] = mk;
    v[k] = vk;
    p[k] = p[k] * decay - step_size * (mk / denom);
  }
  if (out != nullptr) {
#pragma omp simd
    for (int64_t k = 0; k < n; ++k) out[k] = FloatToBf16(p[k]);
  }
}

struct SgdScalars {
  float lr, wd, mu, keep;
};

// One SGD update of [0, n) with the same roundings as torch's kernels (each
// `x.add(y, alpha=a)` is one fused multiply-add, each mul_ rounds on its own).
template <bool kDecay, bool kMomentum, bool kFirst, bool kNesterov>
void SgdKernel(float* __restrict p, const float* __restrict g, float* __restrict buf,
               bf16* __restrict out, int64_t n, const SgdScalars& s) {
  const float lr = s.lr, wd = s.wd, mu = s.mu, keep = s.keep;
#pragma omp simd
  for (int64_t k = 0; k < n; ++k) {
    float d = kDecay ? Fma(p[k], wd, g[k]) : g[k];
    if (kMomentum) {
      const float scaled = buf[k] * mu;
      const float bk = kFirst ? d : Fma(d, keep, scaled);
      buf[k] = bk;
      d = kNesterov ? Fma(bk, mu, d) : bk;
    }
    p[k] = Fma(d, -lr, p[k]);
  }
  if (out != nullptr) {
#pragma omp simd
    for (int64_t k = 0; k < n; ++k) out[k] = FloatToBf16(p[k]);
  }
}

template <bool kDecay, bool kMomentum>
void SgdDispatch(bool first, bool nesterov, float* p, const float* g, float* buf, bf16* out,
                 int64_t n, const SgdScalars& s) {
  if (first) {
    nesterov ? SgdKernel<kDecay, kMomentum, true, true>(p, g, buf, out, n, s)
             : SgdKernel<kDecay, kMomentum, true, false>(p, g, buf, out, n, s);
  } else {
    nesterov ? SgdKernel<kDecay, kMomentum, false, true>(p, g, buf, out, n, s)
             : SgdKernel<kDecay, kMomentum, false, false>(p, g, buf, out, n, s);
  }
}

// Writes the bf16 rounding of master[0, n) into dst.
void StoreBf16(bf16* dst, const float* master, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelThreshold)
  for (int64_t i = 0; i < n; ++i) dst[i] = FloatToBf16(master[i]);
}

}  // namespace

// ---- Optimizer ----

std::vector<Tensor> Optimizer::Grads() const {
  std::vector<Tensor> grads;
  grads.reserve(buffers_.size());
  for (const ParamBuffer& b : buffers_) grads.push_back(b.grad);
  return grads;
}

absl::Status Optimizer::ZeroGrad() {
  for (const ParamBuffer& b : buffers_) {
    float* g = b.grad.data<float>();
    const int64_t n = b.grad.numel();
#pragma omp parallel for schedule(static) if (n > kParallelThreshold)
    for (int64_t c = 0; c < n; c += kChunk) {
      std::memset(g + c, 0, sizeof(float) * std::min(kChunk, n - c));
    }
  }
  return absl::OkStatus();
}

int64_t Optimizer::StateBytes() const {
  int64_t bytes = 0;
  for (const auto& [name, t] : state_) bytes += t.nbytes();
  for (const Tensor& m : masters_) {
    if (m.defined()) bytes += m.nbytes();
  }
  return bytes;
}

absl::Status Optimizer::CheckBuffers(const std::vector<ParamBuffer>& buffers, const char* who) {
  if (buffers.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": no parameter buffers"));
  }
  std::set<std::string> names;
  for (const ParamBuffer& b : buffers) {
    const std::string where = absl::StrCat(who, ": buffer '", b.name, "'");
    if (b.name.empty() || b.name.find('.') != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": names must be non-empty and contain no '.'"));
    }
    if (!names.insert(b.name).second) {
      return absl::InvalidArgumentError(absl::StrCat(where, " appears twice"));
    }
    if (!b.param.defined() || !b.grad.defined()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": undefined param or grad"));
    }
    if (!b.param.device().is_cpu() || !b.grad.device().is_cpu()) {
      return absl::UnimplementedError(absl::StrCat(where, ": only CPU buffers are supported"));
    }
    if (b.param.dtype() != DType::kF32 && b.param.dtype() != DType::kBF16) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": param dtype ", DTypeName(b.param.dtype()), " (expected f32 or bf16)"));
    }
    if (b.grad.dtype() != DType::kF32) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": grad dtype ", DTypeName(b.grad.dtype()), " (expected f32)"));
    }
    if (!b.param.is_contiguous() || !b.grad.is_contiguous()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": param and grad must be contiguous"));
    }
    if (b.param.numel() != b.grad.numel()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": param has ", b.param.numel(),
                                                     " elements but grad has ", b.grad.numel()));
    }
    if (b.param.SharesStorageWith(b.grad)) {
      const int64_t p0 = b.param.offset(), g0 = b.grad.offset();
      const int64_t pe = p0 * DTypeSize(b.param.dtype()), ge = g0 * 4;
      const int64_t pb = pe + static_cast<int64_t>(b.param.nbytes());
      const int64_t gb = ge + static_cast<int64_t>(b.grad.nbytes());
      if (pe < gb && ge < pb) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": param and grad overlap"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Optimizer::InitMasters() {
  masters_.assign(buffers_.size(), Tensor());
  for (size_t i = 0; i < buffers_.size(); ++i) {
    if (buffers_[i].param.dtype() != DType::kBF16) continue;
    const int64_t n = buffers_[i].param.numel();
    CCTUNE_ASSIGN_OR_RETURN(masters_[i], Tensor::Empty({n}, DType::kF32));
    const bf16* src = buffers_[i].param.data<bf16>();
    float* dst = masters_[i].data<float>();
#pragma omp parallel for simd schedule(static) if (n > kParallelThreshold)
    for (int64_t k = 0; k < n; ++k) dst[k] = Bf16ToFloat(src[k]);
  }
  return absl::OkStatus();
}

float* Optimizer::MasterData(size_t i) const {
  return masters_[i].defined() ? masters_[i].data<float>() : buffers_[i].param.data<float>();
}

void Optimizer::ExportMasters(StateDict* tensors) const {
  for (size_t i = 0; i < buffers_.size(); ++i) {
    if (masters_[i].defined()) (*tensors)[buffers_[i].name + ".master"] = masters_[i];
  }
}

absl::Status Optimizer::CheckImport(const OptimizerState& state,
                                    const std::vector<std::string>& hyperparameter_names) const {
  if (state.name != name()) {
    return absl::InvalidArgumentError(
        absl::StrCat("optimizer state is for '", state.name, "', not '", name(), "'"));
  }
  if (state.step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name(), " state: step (", state.step, ") must be >= 0"));
  }
  for (const std::string& key : hyperparameter_names) {
    if (state.hyperparameters.count(key) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(name(), " state: missing hyperparameter '", key, "'"));
    }
  }
  for (const auto& [key, value] : state.hyperparameters) {
    if (std::find(hyperparameter_names.begin(), hyperparameter_names.end(), key) ==
        hyperparameter_names.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(name(), " state: unknown hyperparameter '", key, "' (expected ",
                       absl::StrJoin(hyperparameter_names, ", "), ")"));
    }
  }
  StateDict mine;
  for (const auto& [n, t] : state_) mine[n] = t;
  ExportMasters(&mine);
  std::vector<std::string> expected;
  for (const auto& [n, t] : mine) expected.push_back(n);
  CCTUNE_RETURN_IF_ERROR(
      CheckStateDictKeys(state.tensors, expected, absl::StrCat(name(), " state")));
  for (const auto& [n, t] : mine) {
    const Tensor& src = state.tensors.at(n);
    if (!src.defined() || src.numel() != t.numel() || !IsFloating(src.dtype())) {
      return absl::InvalidArgumentError(absl::StrCat(
          name(), " state tensor '", n, "': expected ", t.numel(), " floating elements, got ",
          src.defined() ? absl::StrCat(src.numel(), " ", DTypeName(src.dtype())) : "undefined"));
    }
  }
  return absl::OkStatus();
}

absl::Status Optimizer::CopyStateTensors(const StateDict& from) {
  StateDict mine;
  for (const auto& [n, t] : state_) mine[n] = t;
  ExportMasters(&mine);
  for (auto& [n, t] : mine) {
    CCTUNE_ASSIGN_OR_RETURN(Tensor src, from.at(n).Reshape({t.numel()}));
    CCTUNE_RETURN_IF_ERROR(t.CopyFrom(src));
  }
  for (size_t i = 0; i < buffers_.size(); ++i) {
    if (masters_[i].defined()) {
      StoreBf16(buffers_[i].param.data<bf16>(), masters_[i].data<float>(), masters_[i].numel());
    }
  }
  return absl::OkStatus();
}

// ---- AdamW ----

absl::StatusOr<std::unique_ptr<AdamW>> AdamW::Create(std::vector<ParamBuffer> buffers,
                                                     const AdamWOptions& o) {
  CCTUNE_RETURN_IF_ERROR(CheckHyper("AdamW", "lr", o.lr, o.lr >= 0, ">= 0"));
  CCTUNE_RETURN_IF_ERROR(CheckHyper("AdamW", "eps", o.eps, o.eps >= 0, ">= 0"));
  CCTUNE_RETURN_IF_ERROR(
      CheckHyper("AdamW", "beta1", o.beta1, o.beta1 >= 0 && o.beta1 < 1, "in [0, 1)"));
  CCTUNE_RETURN_IF_ERROR(
      CheckHyper("AdamW", "beta2", o.beta2, o.beta2 >= 0 && o.beta2 < 1, "in [0, 1)"));
  CCTUNE_RETURN_IF_ERROR(
      CheckHyper("AdamW", "weight_decay", o.weight_decay, o.weight_decay >= 0, ">= 0"));
  CCTUNE_RETURN_IF_ERROR(CheckBuffers(buffers, "AdamW"));
  std::unique_ptr<AdamW> opt(new AdamW(std::move(buffers), o));
  for (const ParamBuffer& b : opt->buffers_) {
    const int64_t n = b.param.numel();
    CCTUNE_ASSIGN_OR_RETURN(opt->state_[b.name + ".exp_avg"], Tensor::Zeros({n}, DType::kF32));
    CCTUNE_ASSIGN_OR_RETURN(opt->state_[b.name + ".exp_avg_sq"], Tensor::Zeros({n}, DType::kF32));
  }
  CCTUNE_RETURN_IF_ERROR(opt->InitMasters());
  return opt;
}

absl::Status AdamW::Step() {
  const double lr = lr_;
  if (!(lr >= 0) || !std::isfinite(lr)) {
    return absl::InvalidArgumentError(absl::StrCat("AdamW: lr (", lr, ") must be >= 0"));
  }
  const int64_t t = step_ + 1;
  // Scalars as torch computes them (Python floats), then used in f32 arithmetic.
  const double bias_correction1 = 1.0 - std::pow(options_.beta1, static_cast<double>(t));
  const double bias_correction2 = 1.0 - std::pow(options_.beta2, static_cast<double>(t));
  AdamWScalars s;
  s.decay = static_cast<float>(1.0 - lr * options_.weight_decay);
  s.step_size = static_cast<float>(lr / bias_correction1);
  s.bc2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  s.w1 = static_cast<float>(1.0 - options_.beta1);  // the lerp weight
  s.beta2 = static_cast<float>(options_.beta2);
  s.w2 = static_cast<float>(1.0 - options_.beta2);
  s.eps = static_cast<float>(options_.eps);
  const bool lerp_low = s.w1 < 0.5f;

  for (size_t i = 0; i < buffers_.size(); ++i) {
    const ParamBuffer& b = buffers_[i];
    float* p = MasterData(i);
    const float* g = b.grad.data<float>();
    float* m = state_.at(b.name + ".exp_avg").data<float>();
    float* v = state_.at(b.name + ".exp_avg_sq").data<float>();
    bf16* out = masters_[i].defined() ? b.param.data<bf16>() : nullptr;
    ForChunks(b.param.numel(), [&](int64_t begin, int64_t end) {
      bf16* o = out != nullptr ? out + begin : nullptr;
      if (lerp_low) {
        AdamWKernel<true>(p + begin, g + begin, m + begin, v + begin, o, end - begin, s);
      } else {
        AdamWKernel<false>(p + begin, g + begin, m + begin, v + begin, o, end - begin, s);
      }
    });
  }
  ++step_;
  return absl::OkStatus();
}

OptimizerState AdamW::ExportState() const {
  OptimizerState s;
  s.name = name();
  s.step = step_;
  s.hyperparameters = {{"lr", lr_},
                       {"beta1", options_.beta1},
                       {"beta2", options_.beta2},
                       {"eps", options_.eps},
                       {"weight_decay", options_.weight_decay}};
  for (const auto& [n, t] : state_) s.tensors[n] = t;
  ExportMasters(&s.tensors);
  return s;
}

absl::Status AdamW::ImportState(const OptimizerState& state) {
  CCTUNE_RETURN_IF_ERROR(CheckImport(state, {"lr", "beta1", "beta2", "eps", "weight_decay"}));
  AdamWOptions o;
  o.lr = state.hyperparameters.at("lr");
  o.beta1 = state.hyperparameters.at("beta1");
  o.beta2 = state.hyperparameters.at("beta2");
  o.eps = state.hyperparameters.at("eps");
  o.weight_decay = state.hyperparameters.at("weight_decay");
  CCTUNE_RETURN_IF_ERROR(CheckHyper("AdamW state", "lr", o.lr, o.lr >= 0, ">= 0"));
  CCTUNE_RETURN_IF_ERROR(CheckHyper("AdamW state", "eps", o.eps, o.eps >= 0, ">= 0"));
  CCTUNE_RETURN_IF_ERROR(
      CheckHyper("AdamW state", "beta1", o.beta1, o.beta1 >= 0 && o.beta1 < 1, "in [0, 1)"));
  CCTUNE_RETURN_IF_ERROR(
      CheckHyper("AdamW state", "beta2", o.beta2, o.beta2 >= 0 && o.beta2 < 1, "in [0, 1)"));
  CCTUNE_RETURN_IF_ERROR(
      CheckHyper("AdamW state", "weight_decay", o.weight_decay, o.weight_decay >= 0, ">= 0"));
  CCTUNE_RETURN_IF_ERROR(CopyStateTensors(state.tensors));
  options_ = o;
  lr_ = o.lr;
  step_ = state.step;
  return absl::OkStatus();
}

// ---- SGD ----

absl::StatusOr<std::unique_ptr<Sgd>> Sgd::Create(std::vector<ParamBuffer> buffers,
                                                 const SgdOptions& o) {
  CCTUNE_RETURN_IF_ERROR(CheckHyper("SGD", "lr", o.lr, o.lr >= 0, ">= 0"));
  CCTUNE_RETURN_IF_ERROR(CheckHyper("SGD", "momentum", o.momentum, o.momentum >= 0, ">= 0"));
  CCTUNE_RETURN_IF_ERROR(CheckHyper("SGD", "dampening", o.dampening, true, "finite"));
  CCTUNE_RETURN_IF_ERROR(
      CheckHyper("SGD", "weight_decay", o.weight_decay, o.weight_decay >= 0, ">= 0"));
  if (o.nesterov && (o.momentum <= 0 || o.dampening != 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("SGD: nesterov needs momentum > 0 and dampening == 0 (momentum ", o.momentum,
                     ", dampening ", o.dampening, ")"));
  }
  CCTUNE_RETURN_IF_ERROR(CheckBuffers(buffers, "SGD"));
  std::unique_ptr<Sgd> opt(new Sgd(std::move(buffers), o));
  if (o.momentum != 0) {
    for (const ParamBuffer& b : opt->buffers_) {
      CCTUNE_ASSIGN_OR_RETURN(opt->state_[b.name + ".momentum_buffer"],
                              Tensor::Zeros({b.param.numel()}, DType::kF32));
    }
  }
  CCTUNE_RETURN_IF_ERROR(opt->InitMasters());
  return opt;
}

absl::Status Sgd::Step() {
  const double lr = lr_;
  if (!(lr >= 0) || !std::isfinite(lr)) {
    return absl::InvalidArgumentError(absl::StrCat("SGD: lr (", lr, ") must be >= 0"));
  }
  SgdScalars s;
  s.lr = static_cast<float>(lr);
  s.wd = static_cast<float>(options_.weight_decay);
  s.mu = static_cast<float>(options_.momentum);
  s.keep = static_cast<float>(1.0 - options_.dampening);
  const bool decay = options_.weight_decay != 0;
  const bool momentum = options_.momentum != 0;
  const bool first = step_ == 0;  // torch starts the momentum buffer as a copy of d_p
  const bool nesterov = options_.nesterov;
  for (size_t i = 0; i < buffers_.size(); ++i) {
    const ParamBuffer& b = buffers_[i];
    float* p = MasterData(i);
    const float* g = b.grad.data<float>();
    float* buf = momentum ? state_.at(b.name + ".momentum_buffer").data<float>() : nullptr;
    bf16* out = masters_[i].defined() ? b.param.data<bf16>() : nullptr;
    ForChunks(b.param.numel(), [&](int64_t begin, int64_t end) {
      float* pb = p + begin;
      const float* gb = g + begin;
      float* bb = buf != nullptr ? buf + begin : nullptr;
      bf16* ob = out != nullptr ? out + begin : nullptr;
      const int64_t n = end - begin;
      if (decay) {
        momentum ? SgdDispatch<true, true>(first, nesterov, pb, gb, bb, ob, n, s)
                 : SgdDispatch<true, false>(first, nesterov, pb, gb, bb, ob, n, s);
      } else {
        momentum ? SgdDispatch<false, true>(first, nesterov, pb, gb, bb, ob, n, s)
                 : SgdDispatch<false, false>(first, nesterov, pb, gb, bb, ob, n, s);
      }
    });
  }
  ++step_;
  return absl::OkStatus();
}

OptimizerState Sgd::ExportState() const {
  OptimizerState s;
  s.name = name();
  s.step = step_;
  s.hyperparameters = {{"lr", lr_},
                       {"momentum", options_.momentum},
                       {"dampening", options_.dampening},
                       {"weight_decay", options_.weight_decay},
                       {"nesterov", options_.nesterov ? 1.0 : 0.0}};
  for (const auto& [n, t] : state_) s.tensors[n] = t;
  ExportMasters(&s.tensors);
  return s;
}

absl::Status Sgd::ImportState(const OptimizerState& state) {
  CCTUNE_RETURN_IF_ERROR(
      CheckImport(state, {"lr", "momentum", "dampening", "weight_decay", "nesterov"}));
  SgdOptions o;
  o.lr = state.hyperparameters.at("lr");
  o.momentum = state.hyperparameters.at("momentum");
  o.dampening = state.hyperparameters.at("dampening");
  o.weight_decay = state.hyperparameters.at("weight_decay");
  o.nesterov = state.hyperparameters.at("nesterov") != 0;
  if ((o.momentum != 0) != (options_.momentum != 0)) {
    // The set of state tensors depends on it; CheckImport compared against ours.
    return absl::InvalidArgumentError(
        absl::StrCat("SGD state: momentum (", o.momentum, ") and this optimizer's momentum (",
                     options_.momentum, ") must both be zero or both non-zero"));
  }
  CCTUNE_RETURN_IF_ERROR(CheckHyper("SGD state", "lr", o.lr, o.lr >= 0, ">= 0"));
  CCTUNE_RETURN_IF_ERROR(
      CheckHyper("SGD state", "weight_decay", o.weight_decay, o.weight_decay >= 0, ">= 0"));
  CCTUNE_RETURN_IF_ERROR(CopyStateTensors(state.tensors));
  options_ = o;
  lr_ = o.lr;
  step_ = state.step;
  return absl::OkStatus();
}

// ---- Gradient norm ----

absl::StatusOr<double> GradNorm(absl::Span<const Tensor> grads) {
  double total = 0;
  for (size_t t = 0; t < grads.size(); ++t) {
    const Tensor& g = grads[t];
    if (!g.defined() || g.dtype() != DType::kF32 || !g.is_contiguous() || !g.device().is_cpu()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "GradNorm: gradient ", t, " must be a contiguous CPU f32 tensor, got ",
          g.defined() ? absl::StrCat(DTypeName(g.dtype()), " ", ShapeToString(g.shape()))
                      : "undefined"));
    }
    const float* x = g.data<float>();
    const int64_t n = g.numel();
    const int64_t chunks = (n + kChunk - 1) / kChunk;
    std::vector<double> partial(chunks, 0.0);
#pragma omp parallel for schedule(static) if (n > kParallelThreshold)
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t begin = c * kChunk, end = std::min(n, begin + kChunk);
      double s = 0;
#pragma omp simd reduction(+ : s)
      for (int64_t k = begin; k < end; ++k) s += static_cast<double>(x[k]) * x[k];
      partial[c] = s;
    }
    for (double s : partial) total += s;
  }
  return std::sqrt(total);
}

absl::StatusOr<double> ClipGradNorm(absl::Span<const Tensor> grads, double max_norm) {
  if (!(max_norm > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ClipGradNorm: max_norm (", max_norm, ") must be > 0"));
  }
  CCTUNE_ASSIGN_OR_RETURN(const double norm, GradNorm(grads));
  if (!std::isfinite(norm)) return norm;
  const double coef = max_norm / (norm + 1e-6);
  if (coef >= 1.0) return norm;  // torch multiplies by exactly 1.0 here: a no-op
  const float scale = static_cast<float>(coef);
  for (const Tensor& g : grads) {
    float* x = g.data<float>();
    const int64_t n = g.numel();
#pragma omp parallel for simd schedule(static) if (n > kParallelThreshold)
    for (int64_t k = 0; k < n; ++k) x[k] *= scale;
  }
  return norm;
}

}  // namespace cctune
