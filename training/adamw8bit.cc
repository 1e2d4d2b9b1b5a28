#include "training/adamw8bit.h"

#include <cmath>
#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/dtype.h"
#include "core/status.h"
#include "kernels/cpu/adamw8bit.h"
#include "kernels/ops.h"

namespace cctune {
namespace {

constexpr const char* kHyperparameters[] = {"lr", "beta1", "beta2", "eps", "weight_decay",
                                            "min_8bit_size"};

absl::Status CheckOptions(const char* who, const AdamW8bitOptions& options) {
  const AdamWOptions& o = options.adamw;
  auto bad = [&](const char* key, double v, const char* requirement) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": ", key, " (", v, ") must be ",
                                                   requirement));
  };
  if (!(o.lr >= 0) || !std::isfinite(o.lr)) return bad("lr", o.lr, ">= 0");
  if (!(o.eps >= 0) || !std::isfinite(o.eps)) return bad("eps", o.eps, ">= 0");
  if (!(o.beta1 >= 0 && o.beta1 < 1)) return bad("beta1", o.beta1, "in [0, 1)");
  if (!(o.beta2 >= 0 && o.beta2 < 1)) return bad("beta2", o.beta2, "in [0, 1)");
  if (!(o.weight_decay >= 0) || !std::isfinite(o.weight_decay)) {
    return bad("weight_decay", o.weight_decay, ">= 0");
  }
  if (options.min_8bit_size < 0) {
    return bad("min_8bit_size", static_cast<double>(options.min_8bit_size), ">= 0");
  }
  return absl::OkStatus();
}

int64_t Blocks(int64_t n) { return (n + cpu::kAdamW8bitBlock - 1) / cpu::kAdamW8bitBlock; }

uint8_t* Codes(Tensor& t) { return reinterpret_cast<uint8_t*>(t.data<int32_t>()); }

}  // namespace

absl::StatusOr<std::unique_ptr<AdamW8bit>> AdamW8bit::Create(std::vector<ParamBuffer> buffers,
                                                             const AdamW8bitOptions& options) {
  CCTUNE_RETURN_IF_ERROR(CheckOptions("AdamW8bit", options));
  CCTUNE_RETURN_IF_ERROR(CheckBuffers(buffers, "AdamW8bit"));
  for (const ParamBuffer& b : buffers) {
    if (!b.param.device().is_cpu()) {
      return absl::UnimplementedError(absl::StrCat(
          "AdamW8bit (bitsandbytes.optim.AdamW8bit / PagedAdamW8bit): buffer '", b.name,
          "' is on ", b.param.device().ToString(),
          "; the 8-bit optimizer runs on CPU buffers only (on CUDA use torch.optim.AdamW or "
          "bitsandbytes.optim.PagedAdamW)"));
    }
  }
  std::unique_ptr<AdamW8bit> opt(new AdamW8bit(std::move(buffers), options));
  for (const ParamBuffer& b : opt->buffers_) {
    const int64_t n = b.param.numel();
    const bool q = n >= options.min_8bit_size;
    opt->quantized_.push_back(q);
    if (q) {
      // All-zero codes with zero scales dequantize to 0: the moments' initial value.
      for (const char* kind : {".exp_avg", ".exp_avg_sq"}) {
        CCTUNE_ASSIGN_OR_RETURN(opt->state_[absl::StrCat(b.name, kind, "_q8")],
                                Tensor::Zeros({(n + 3) / 4}, DType::kI32));
        CCTUNE_ASSIGN_OR_RETURN(opt->state_[absl::StrCat(b.name, kind, "_absmax")],
                                Tensor::Zeros({Blocks(n)}, DType::kF32));
      }
    } else {
      CCTUNE_ASSIGN_OR_RETURN(opt->state_[b.name + ".exp_avg"], Tensor::Zeros({n}, DType::kF32));
      CCTUNE_ASSIGN_OR_RETURN(opt->state_[b.name + ".exp_avg_sq"],
                              Tensor::Zeros({n}, DType::kF32));
    }
  }
  CCTUNE_RETURN_IF_ERROR(opt->InitMasters());
  return opt;
}

absl::Status AdamW8bit::Step() {
  const AdamWOptions& o = options_.adamw;
  if (!(lr_ >= 0) || !std::isfinite(lr_)) {
    return absl::InvalidArgumentError(absl::StrCat("AdamW8bit: lr (", lr_, ") must be >= 0"));
  }
  const int64_t t = step_ + 1;
  cpu::AdamW8bitScalars s;
  s.beta1 = static_cast<float>(o.beta1);
  s.beta2 = static_cast<float>(o.beta2);
  s.eps = static_cast<float>(o.eps);
  s.w1 = static_cast<float>(1.0 - o.beta1);
  s.w2 = static_cast<float>(1.0 - o.beta2);
  s.decay = static_cast<float>(1.0 - lr_ * o.weight_decay);
  s.step_size = static_cast<float>(lr_ / (1.0 - std::pow(o.beta1, static_cast<double>(t))));
  s.bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(o.beta2, static_cast<double>(t))));
  ops::AdamWStep hp;  // buffers under min_8bit_size: AdamW's update
  hp.lr = lr_;
  hp.beta1 = o.beta1;
  hp.beta2 = o.beta2;
  hp.eps = o.eps;
  hp.weight_decay = o.weight_decay;
  hp.step = t;
  for (size_t i = 0; i < buffers_.size(); ++i) {
    const std::string& name = buffers_[i].name;
    Tensor param = buffers_[i].param;
    if (!quantized_[i]) {
      CCTUNE_RETURN_IF_ERROR(ops::AdamWUpdate(param, Master(i), state_.at(name + ".exp_avg"),
                                              state_.at(name + ".exp_avg_sq"),
                                              buffers_[i].grad, hp));
      continue;
    }
    Tensor* master = Master(i);
    float* p = master != nullptr ? master->data<float>() : param.data<float>();
    bf16* out = master != nullptr ? param.data<bf16>() : nullptr;
    cpu::AdamW8bitUpdate(p, out, buffers_[i].grad.data<float>(),
                         Codes(state_.at(name + ".exp_avg_q8")),
                         state_.at(name + ".exp_avg_absmax").data<float>(),
                         Codes(state_.at(name + ".exp_avg_sq_q8")),
                         state_.at(name + ".exp_avg_sq_absmax").data<float>(), param.numel(), s);
  }
  ++step_;
  return absl::OkStatus();
}

OptimizerState AdamW8bit::ExportState() const {
  OptimizerState s;
  s.name = name();
  s.step = step_;
  const AdamWOptions& o = options_.adamw;
  s.hyperparameters = {{"lr", lr_},
                       {"beta1", o.beta1},
                       {"beta2", o.beta2},
                       {"eps", o.eps},
                       {"weight_decay", o.weight_decay},
                       {"min_8bit_size", static_cast<double>(options_.min_8bit_size)}};
  for (const auto& [n, t] : state_) s.tensors[n] = t;
  ExportMasters(&s.tensors);
  return s;
}

absl::Status AdamW8bit::ImportState(const OptimizerState& state) {
  CCTUNE_RETURN_IF_ERROR(CheckImport(
      state, std::vector<std::string>(std::begin(kHyperparameters), std::end(kHyperparameters))));
  AdamW8bitOptions o;
  o.adamw.lr = state.hyperparameters.at("lr");
  o.adamw.beta1 = state.hyperparameters.at("beta1");
  o.adamw.beta2 = state.hyperparameters.at("beta2");
  o.adamw.eps = state.hyperparameters.at("eps");
  o.adamw.weight_decay = state.hyperparameters.at("weight_decay");
  const double min_size = state.hyperparameters.at("min_8bit_size");
  o.min_8bit_size = static_cast<int64_t>(min_size);
  CCTUNE_RETURN_IF_ERROR(CheckOptions("AdamW8bit state", o));
  if (min_size != static_cast<double>(options_.min_8bit_size)) {
    // The tensor names above already agree; a different threshold could still have split the
    // buffers the same way, but the state would then not be this optimizer's.
    return absl::InvalidArgumentError(
        absl::StrCat("AdamW8bit state: min_8bit_size (", min_size, ") differs from the "
                     "optimizer's (", options_.min_8bit_size, ")"));
  }
  CCTUNE_RETURN_IF_ERROR(CopyStateTensors(state.tensors));
  options_ = o;
  lr_ = o.adamw.lr;
  step_ = state.step;
  return absl::OkStatus();
}

}  // namespace cctune
