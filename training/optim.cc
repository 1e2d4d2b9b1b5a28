#include "training/optim.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/dtype.h"
#include "core/status.h"
#include "kernels/ops.h"

namespace cctune {
namespace {

// Loops shorter than this stay on one thread (the fork/join would cost more than it saves).
constexpr int64_t kParallelThreshold = 1 << 15;
// CPU loops (ZeroGrad) work in chunks of this many elements.
constexpr int64_t kChunk = 1 << 14;

absl::Status CheckHyper(const char* who, const char* key, double v, bool ok,
                        const char* requirement) {
  if (ok && std::isfinite(v)) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(who, ": ", key, " (", v, ") must be ", requirement));
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
    if (!b.grad.device().is_cpu()) {
      // A broadcast 0 copied over the buffer: a device-side fill (NaNs do not survive it as
      // they would a multiply by 0). The 0 is uploaded once, not per call: a host-to-device
      // copy would wait for the queued work.
      if (!device_zero_.defined()) {
        CCTUNE_ASSIGN_OR_RETURN(device_zero_, Tensor::Zeros({1}, DType::kF32, b.grad.device()));
      }
      CCTUNE_ASSIGN_OR_RETURN(Tensor zeros, device_zero_.Expand({b.grad.numel()}));
      CCTUNE_ASSIGN_OR_RETURN(Tensor flat, b.grad.View({b.grad.numel()}));
      CCTUNE_RETURN_IF_ERROR(flat.CopyFrom(zeros));
      continue;
    }
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
    if (b.param.device().is_meta() || b.grad.device() != b.param.device() ||
        b.param.device() != buffers[0].param.device()) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": param is on ", b.param.device().ToString(), " and grad on ",
          b.grad.device().ToString(), "; every param and grad must be on one device (",
          buffers[0].param.device().ToString(), ", the first param's), not meta"));
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
    const Device device = buffers_[i].param.device();
    CCTUNE_ASSIGN_OR_RETURN(masters_[i], Tensor::Empty({n}, DType::kF32, device));
    if (!device.is_cpu()) {
      CCTUNE_ASSIGN_OR_RETURN(Tensor flat, buffers_[i].param.View({n}));
      CCTUNE_RETURN_IF_ERROR(masters_[i].CopyFrom(flat));
      continue;
    }
    const bf16* src = buffers_[i].param.data<bf16>();
    float* dst = masters_[i].data<float>();
#pragma omp parallel for simd schedule(static) if (n > kParallelThreshold)
    for (int64_t k = 0; k < n; ++k) dst[k] = Bf16ToFloat(src[k]);
  }
  return absl::OkStatus();
}

Tensor* Optimizer::Master(size_t i) {
  return masters_[i].defined() ? &masters_[i] : nullptr;
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
    if (t.dtype() == DType::kI32) {  // packed codes (AdamW8bit): the same words, exactly
      if (!src.defined() || src.numel() != t.numel() || src.dtype() != DType::kI32) {
        return absl::InvalidArgumentError(absl::StrCat(
            name(), " state tensor '", n, "': expected ", t.numel(), " i32 elements, got ",
            src.defined() ? absl::StrCat(src.numel(), " ", DTypeName(src.dtype()))
                          : "undefined"));
      }
      continue;
    }
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
    if (!masters_[i].defined()) continue;
    if (buffers_[i].param.device().is_cpu()) {
      StoreBf16(buffers_[i].param.data<bf16>(), masters_[i].data<float>(), masters_[i].numel());
    } else {  // the device's f32 -> bf16 copy rounds to nearest even, as FloatToBf16
      CCTUNE_ASSIGN_OR_RETURN(Tensor flat, buffers_[i].param.View({masters_[i].numel()}));
      CCTUNE_RETURN_IF_ERROR(flat.CopyFrom(masters_[i]));
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
    CCTUNE_ASSIGN_OR_RETURN(opt->state_[b.name + ".exp_avg"],
                            Tensor::Zeros({n}, DType::kF32, b.param.device()));
    CCTUNE_ASSIGN_OR_RETURN(opt->state_[b.name + ".exp_avg_sq"],
                            Tensor::Zeros({n}, DType::kF32, b.param.device()));
  }
  CCTUNE_RETURN_IF_ERROR(opt->InitMasters());
  return opt;
}

absl::Status AdamW::Step() {
  const double lr = lr_;
  if (!(lr >= 0) || !std::isfinite(lr)) {
    return absl::InvalidArgumentError(absl::StrCat("AdamW: lr (", lr, ") must be >= 0"));
  }
  ops::AdamWStep hp;
  hp.lr = lr;
  hp.beta1 = options_.beta1;
  hp.beta2 = options_.beta2;
  hp.eps = options_.eps;
  hp.weight_decay = options_.weight_decay;
  hp.step = step_ + 1;
  for (size_t i = 0; i < buffers_.size(); ++i) {
    Tensor param = buffers_[i].param;
    Tensor& m = state_.at(buffers_[i].name + ".exp_avg");
    Tensor& v = state_.at(buffers_[i].name + ".exp_avg_sq");
    CCTUNE_RETURN_IF_ERROR(ops::AdamWUpdate(param, Master(i), m, v, buffers_[i].grad, hp));
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
                              Tensor::Zeros({b.param.numel()}, DType::kF32, b.param.device()));
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
  ops::SgdStep hp;
  hp.lr = lr;
  hp.momentum = options_.momentum;
  hp.dampening = options_.dampening;
  hp.weight_decay = options_.weight_decay;
  hp.nesterov = options_.nesterov;
  hp.first = step_ == 0;  // torch starts the momentum buffer as a copy of d_p
  const bool momentum = options_.momentum != 0;
  for (size_t i = 0; i < buffers_.size(); ++i) {
    Tensor param = buffers_[i].param;
    Tensor* buf = momentum ? &state_.at(buffers_[i].name + ".momentum_buffer") : nullptr;
    CCTUNE_RETURN_IF_ERROR(ops::SgdUpdate(param, Master(i), buf, buffers_[i].grad, hp));
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
    if (!g.defined() || g.dtype() != DType::kF32 || !g.is_contiguous()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "GradNorm: gradient ", t, " must be a contiguous f32 tensor, got ",
          g.defined() ? absl::StrCat(DTypeName(g.dtype()), " ", ShapeToString(g.shape()))
                      : "undefined"));
    }
    CCTUNE_RETURN_IF_ERROR(ops::SquaredNorm(&total, g));
  }
  return std::sqrt(total);
}

absl::StatusOr<double> ClipGradNorm(absl::Span<const Tensor> grads, double max_norm) {
  if (!(max_norm > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("ClipGradNorm: max_norm (", max_norm, ") must be > 0"));
  }
  CCTUNE_ASSIGN_OR_RETURN(const double norm, GradNorm(grads));
  CCTUNE_RETURN_IF_ERROR(ClipGradsToNorm(grads, norm, max_norm));
  return norm;
}

absl::Status ClipGradsToNorm(absl::Span<const Tensor> grads, double norm, double max_norm) {
  if (!std::isfinite(norm)) return absl::OkStatus();
  const double coef = max_norm / (norm + 1e-6);
  if (coef >= 1.0) return absl::OkStatus();  // torch multiplies by exactly 1.0 here: a no-op
  const float scale = static_cast<float>(coef);
  for (const Tensor& g : grads) {
    Tensor x = g;
    CCTUNE_RETURN_IF_ERROR(ops::Scale(x, x, scale));  // x * scale, one rounding as before
  }
  return absl::OkStatus();
}

}  // namespace cctune
