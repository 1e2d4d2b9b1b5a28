#include "models/qlora.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "models/lora.h"
#include "modules/nf4_linear.h"

namespace cctune {

namespace {

constexpr absl::string_view kMeanSuffix = ".nf4.scaler_mean";
constexpr const char* kScaleNames[] = {".nf4.quantized_scalers", ".nf4.quantization_factor",
                                       ".nf4.scaler_mean"};

// The four tensors of NF4 layer `layer` in `sd`.
absl::StatusOr<cpu::Nf4View> ViewIn(const StateDict& sd, const std::string& layer,
                                    Shape* codes_shape) {
  const Tensor* t[4];
  const std::string names[4] = {layer + ".weight", layer + kScaleNames[0], layer + kScaleNames[1],
                                layer + kScaleNames[2]};
  for (int i = 0; i < 4; ++i) {
    auto it = sd.find(names[i]);
    if (it == sd.end()) return absl::NotFoundError(absl::StrCat("NF4: no ", names[i]));
    t[i] = &it->second;
  }
  if (codes_shape != nullptr) *codes_shape = t[0]->shape();
  return Nf4ViewOf(*t[0], *t[1], *t[2], *t[3], names[0]);
}

}  // namespace

std::vector<std::string> Nf4Layers(const Module& model) {
  std::vector<std::string> layers;
  for (const auto& [name, p] : model.NamedParameters()) {
    if (absl::EndsWith(name, kMeanSuffix)) {
      layers.push_back(name.substr(0, name.size() - kMeanSuffix.size()));
    }
  }
  return layers;
}

bool IsNf4Parameter(const std::string& name, const std::vector<std::string>& nf4_layers) {
  for (const std::string& layer : nf4_layers) {
    if (!absl::StartsWith(name, layer) || name.size() == layer.size() || name[layer.size()] != '.') {
      continue;
    }
    const absl::string_view rest = absl::string_view(name).substr(layer.size());
    if (rest == ".weight" || absl::StartsWith(rest, ".nf4.")) return true;
  }
  return false;
}

absl::StatusOr<std::vector<std::string>> QuantizeNf4Weights(
    const StateDict& full, const std::vector<std::string>& nf4_layers, ParameterArena& params) {
  std::vector<std::string> consumed;
  for (const std::string& layer : nf4_layers) {
    const std::string name = layer + ".weight";
    auto it = full.find(name);
    if (it == full.end()) {
      return absl::NotFoundError(
          absl::StrCat("QLoRA: the checkpoint has no ", name, " to quantize to NF4"));
    }
    Tensor w = it->second;
    if (!w.device().is_cpu()) {
      CCTUNE_ASSIGN_OR_RETURN(w, w.To(Device::Cpu()));
    }
    if (!w.is_contiguous()) {
      CCTUNE_ASSIGN_OR_RETURN(w, w.Contiguous());
    }
    CCTUNE_ASSIGN_OR_RETURN(Tensor codes, params.Get(name));
    CCTUNE_ASSIGN_OR_RETURN(Tensor qs, params.Get(layer + kScaleNames[0]));
    CCTUNE_ASSIGN_OR_RETURN(Tensor qf, params.Get(layer + kScaleNames[1]));
    CCTUNE_ASSIGN_OR_RETURN(Tensor mean, params.Get(layer + kScaleNames[2]));
    CCTUNE_RETURN_IF_ERROR(QuantizeNf4Tensors(w, codes, qs, qf, mean, name));
    // A view of a mapped checkpoint: its pages go back to the kernel once quantized, so the
    // load holds the NF4 model plus one full-precision tensor (a no-op for other storage).
    if (w.storage() != nullptr) {
      w.storage()->ReleasePages(static_cast<size_t>(w.offset()) * DTypeSize(w.dtype()),
                                w.nbytes());
    }
    consumed.push_back(name);
  }
  return consumed;
}

absl::StatusOr<StateDict> DequantizedStateDict(const StateDict& state_dict,
                                               const std::vector<std::string>& nf4_layers,
                                               DType dtype) {
  StateDict out;
  for (const auto& [name, t] : state_dict) {
    if (!IsNf4Parameter(name, nf4_layers)) out.emplace(name, t);
  }
  for (const std::string& layer : nf4_layers) {
    Shape codes_shape;
    CCTUNE_ASSIGN_OR_RETURN(const cpu::Nf4View v, ViewIn(state_dict, layer, &codes_shape));
    CCTUNE_ASSIGN_OR_RETURN(Tensor w, DequantizeNf4Tensor(v, codes_shape, dtype));
    out[layer + ".weight"] = std::move(w);
  }
  return out;
}

ParameterBytes CountParameterBytes(const Module& model, DType dtype) {
  const std::vector<std::string> layers = Nf4Layers(model);
  ParameterBytes b;
  for (const auto& [name, p] : model.NamedParameters()) {
    int64_t numel = 1;
    for (int64_t s : p->shape) numel *= s;
    const int64_t bytes = numel * static_cast<int64_t>(DTypeSize(p->dtype.value_or(dtype)));
    if (IsLoRAParameter(name)) {
      b.adapters += bytes;
    } else if (IsNf4Parameter(name, layers)) {
      b.nf4 += bytes;
      if (absl::EndsWith(name, ".weight")) b.nf4_elements += numel * 8;
    } else {
      b.other += bytes;
    }
  }
  return b;
}

}  // namespace cctune
