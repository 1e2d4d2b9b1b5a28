#include "training/optimizer_in_backward.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "core/status.h"

namespace cctune {
namespace {

// The backward stage whose end completes `name`'s gradient (DecoderTrainer's numbering).
absl::StatusOr<int> StageOf(const std::string& name, int num_layers) {
  if (absl::StartsWith(name, "output.")) return num_layers + 1;
  if (absl::StartsWith(name, "norm.")) return num_layers;
  if (absl::StartsWith(name, "tok_embeddings.")) return -1;
  if (absl::StartsWith(name, "layers.")) {
    const std::string rest = name.substr(7);
    int layer = -1;
    if (absl::SimpleAtoi(rest.substr(0, rest.find('.')), &layer) && layer >= 0 &&
        layer < num_layers) {
      return layer;
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "optimizer_in_bwd: parameter '", name, "' is in none of the backward's stages (output., "
      "norm., layers.<0..", num_layers - 1, ">., tok_embeddings.)"));
}

}  // namespace

OptimizerInBackward::OptimizerInBackward(std::vector<ParamBuffer> all, std::vector<Stage> stages,
                                         std::vector<std::pair<std::string, Tensor>> gradients,
                                         std::vector<Tensor> storage, int num_layers)
    : Optimizer(std::move(all), stages.front().optimizer->lr()),
      name_(stages.front().optimizer->name()),
      stages_(std::move(stages)),
      stage_index_(num_layers + 3, -1),
      gradients_(std::move(gradients)),
      storage_(std::move(storage)) {
  for (size_t k = 0; k < stages_.size(); ++k) stage_index_[stages_[k].stage + 1] = k;
}

absl::StatusOr<std::unique_ptr<OptimizerInBackward>> OptimizerInBackward::Create(
    const TransformerDecoder& model, const ParameterArena& params,
    const ParameterLayout& trainable, const Factory& make_optimizer) {
  const int num_layers = static_cast<int>(model.num_layers());
  // Stage -> its parameters, in the layout's order.
  std::map<int, std::vector<const ParameterLayout::Entry*>> by_stage;
  for (const ParameterLayout::Entry& e : trainable.entries()) {
    CCTUNE_ASSIGN_OR_RETURN(int stage, StageOf(e.spec.name, num_layers));
    by_stage[stage].push_back(&e);
  }
  if (by_stage.empty()) {
    return absl::InvalidArgumentError("optimizer_in_bwd: no trainable parameters");
  }
  const Device device = params.device();
  auto stage_numel = [&](int stage) {
    int64_t n = 0;
    for (const ParameterLayout::Entry* e : by_stage[stage]) n += e->numel;
    return n;
  };
  // One buffer shared by the layers (the largest layer's size), one each for the others.
  int64_t layer_numel = 0;
  for (auto& [stage, entries] : by_stage) {
    if (stage >= 0 && stage < num_layers) layer_numel = std::max(layer_numel, stage_numel(stage));
  }
  std::vector<Tensor> storage;
  Tensor layer_buffer;
  if (layer_numel > 0) {
    CCTUNE_ASSIGN_OR_RETURN(layer_buffer, Tensor::Zeros({layer_numel}, DType::kF32, device));
    storage.push_back(layer_buffer);
  }
  std::vector<Stage> stages;
  std::vector<ParamBuffer> all;
  std::vector<std::pair<std::string, Tensor>> gradients;
  std::set<std::string> buffer_names;
  // Latest stage first: the order the backward reaches them.
  for (auto it = by_stage.rbegin(); it != by_stage.rend(); ++it) {
    const int stage = it->first;
    Tensor buffer = layer_buffer;
    if (stage < 0 || stage >= num_layers) {
      CCTUNE_ASSIGN_OR_RETURN(buffer, Tensor::Zeros({stage_numel(stage)}, DType::kF32, device));
      storage.push_back(buffer);
    }
    std::vector<ParamBuffer> bufs;
    int64_t offset = 0;
    for (const ParameterLayout::Entry* e : it->second) {
      CCTUNE_ASSIGN_OR_RETURN(Tensor param, params.Get(e->spec.name));
      CCTUNE_ASSIGN_OR_RETURN(Tensor flat, buffer.Narrow(0, offset, e->numel));
      CCTUNE_ASSIGN_OR_RETURN(Tensor grad, flat.View(e->spec.shape));
      offset += e->numel;
      const std::string buffer_name = absl::StrReplaceAll(e->spec.name, {{".", "_"}});
      if (!buffer_names.insert(buffer_name).second) {
        return absl::InvalidArgumentError(absl::StrCat(
            "optimizer_in_bwd: two parameters map to the optimizer buffer name '", buffer_name,
            "'"));
      }
      bufs.push_back({buffer_name, param, grad});
      gradients.emplace_back(e->spec.name, grad);
    }
    all.insert(all.end(), bufs.begin(), bufs.end());
    Stage s;
    s.stage = stage;
    CCTUNE_ASSIGN_OR_RETURN(s.optimizer, make_optimizer(bufs));
    if (!stages.empty() && std::string(s.optimizer->name()) != stages.front().optimizer->name()) {
      return absl::InternalError("optimizer_in_bwd: the factory made different optimizers");
    }
    stages.push_back(std::move(s));
  }
  return std::unique_ptr<OptimizerInBackward>(new OptimizerInBackward(
      std::move(all), std::move(stages), std::move(gradients), std::move(storage), num_layers));
}

int64_t OptimizerInBackward::GradientBytes() const {
  int64_t bytes = 0;
  for (const Tensor& t : storage_) bytes += t.nbytes();
  return bytes;
}

int64_t OptimizerInBackward::StateBytes() const {
  int64_t bytes = 0;
  for (const Stage& s : stages_) bytes += s.optimizer->StateBytes();
  return bytes;
}

void OptimizerInBackward::Attach(DecoderTrainer& trainer) {
  trainer.set_gradient_ready_hook([this](int stage) { return OnGradientsReady(stage); });
}

absl::Status OptimizerInBackward::OnGradientsReady(int stage) {
  if (stage + 1 < 0 || stage + 1 >= static_cast<int>(stage_index_.size())) {
    return absl::InternalError(absl::StrCat("optimizer_in_bwd: no backward stage ", stage));
  }
  const int k = stage_index_[stage + 1];
  if (k < 0) return absl::OkStatus();  // nothing trains there
  Stage& s = stages_[k];
  if (s.updated) {
    return absl::FailedPreconditionError(absl::StrCat(
        "optimizer_in_bwd: stage ", stage, " completed twice in one step (one backward per "
        "step: gradient accumulation is not supported)"));
  }
  CCTUNE_ASSIGN_OR_RETURN(const double norm, GradNorm(s.optimizer->Grads()));
  if (!std::isfinite(norm)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "non-finite gradient norm (", norm, ") of ", s.optimizer->buffers().front().name,
        "'s stage at optimizer step ", step_, "; that stage was not updated (optimizer_in_bwd: "
        "the stages after it in the backward already were)"));
  }
  squared_norm_ += norm * norm;
  s.optimizer->set_lr(lr_);
  CCTUNE_RETURN_IF_ERROR(s.optimizer->Step());
  CCTUNE_RETURN_IF_ERROR(s.optimizer->ZeroGrad());
  s.updated = true;
  return absl::OkStatus();
}

double OptimizerInBackward::grad_norm() const { return std::sqrt(squared_norm_); }

absl::Status OptimizerInBackward::ZeroGrad() {
  for (Stage& s : stages_) {
    CCTUNE_RETURN_IF_ERROR(s.optimizer->ZeroGrad());
    s.updated = false;
  }
  squared_norm_ = 0;
  return absl::OkStatus();
}

absl::Status OptimizerInBackward::Step() {
  for (const Stage& s : stages_) {
    if (!s.updated) {
      return absl::FailedPreconditionError(absl::StrCat(
          "optimizer_in_bwd: the backward did not reach stage ", s.stage, " this step"));
    }
  }
  ++step_;
  return absl::OkStatus();
}

OptimizerState OptimizerInBackward::ExportState() const {
  OptimizerState out;
  out.name = name_;
  out.step = step_;
  for (const Stage& s : stages_) {
    OptimizerState part = s.optimizer->ExportState();
    out.hyperparameters = part.hyperparameters;
    for (auto& [n, t] : part.tensors) out.tensors[n] = t;
  }
  out.hyperparameters["lr"] = lr_;
  return out;
}

absl::Status OptimizerInBackward::ImportState(const OptimizerState& state) {
  // Split by stage; every tensor must belong to one (checked before anything changes).
  std::vector<OptimizerState> parts;
  size_t claimed = 0;
  for (const Stage& s : stages_) {
    OptimizerState part;
    part.name = state.name;
    part.step = state.step;
    part.hyperparameters = state.hyperparameters;
    for (const auto& [n, t] : s.optimizer->ExportState().tensors) {
      auto it = state.tensors.find(n);
      if (it == state.tensors.end()) {
        return absl::InvalidArgumentError(absl::StrCat(
            name_, " state (optimizer_in_bwd): missing tensor '", n,
            "' (a state saved without optimizer_in_bwd names whole arenas instead)"));
      }
      part.tensors[n] = it->second;
      ++claimed;
    }
    parts.push_back(std::move(part));
  }
  if (claimed != state.tensors.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        name_, " state (optimizer_in_bwd): ", state.tensors.size() - claimed,
        " tensors belong to no parameter of this run"));
  }
  for (size_t k = 0; k < stages_.size(); ++k) {
    CCTUNE_RETURN_IF_ERROR(stages_[k].optimizer->ImportState(parts[k]));
  }
  step_ = state.step;
  lr_ = stages_.front().optimizer->lr();
  return absl::OkStatus();
}

}  // namespace cctune
