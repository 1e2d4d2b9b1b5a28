#include "models/quantization.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "models/model_builder.h"

namespace cctune {

namespace {

using cpu::QuantFormat;

constexpr char kInt8Name[] = "cctune.training.quantization.Int8WeightOnlyQuantizer";
constexpr char kInt4Name[] = "cctune.training.quantization.Int4WeightOnlyQuantizer";

absl::Status CheckGroupsize(int64_t g) {
  if (g >= cpu::kMinInt4GroupSize && g <= cpu::kMaxInt4GroupSize && g % cpu::kInt4BlockSize == 0) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("groupsize must be a multiple of 32 in [32, 256] (32, 64, 128, 256 as "
                   "torchao's), got ",
                   g));
}

absl::Status GroupsizeKey(const ConfigNode& node) {
  if (node.kind() != ConfigNode::Kind::kInt) return absl::OkStatus();  // the type check reports
  return CheckGroupsize(node.int_value());
}

// Copies `full`'s [out, in] weight into the quantized tensors.
absl::Status QuantizeInto(const std::string& prefix, const Tensor& w, const WeightQuantization& q,
                          StateDict& out) {
  if (!w.defined() || w.device().is_meta() || w.dim() != 2 || !IsFloating(w.dtype())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "quantize: ", prefix, "weight must be a 2-D float tensor [out, in], got ",
        w.defined() ? absl::StrCat(DTypeName(w.dtype()), " ", ShapeToString(w.shape())) : "none"));
  }
  CCTUNE_ASSIGN_OR_RETURN(Tensor src, w.To(Device::Cpu()));
  if (!src.is_contiguous()) {
    CCTUNE_ASSIGN_OR_RETURN(src, src.Contiguous());
  }
  const int64_t n = w.size(0), k = w.size(1);
  CCTUNE_ASSIGN_OR_RETURN(Tensor data,
                          Tensor::Empty(QuantizedWeightShape(q, k, n), DType::kI32, Device::Cpu()));
  data.storage()->AdviseHugePages();  // decode streams it once per token (core/storage.h)
  uint8_t* bytes = static_cast<uint8_t*>(data.raw_data());
  if (q.format == QuantFormat::kInt8PerChannel) {
    CCTUNE_ASSIGN_OR_RETURN(Tensor scales, Tensor::Empty({n}, DType::kF32, Device::Cpu()));
    cpu::QuantizeInt8(n, k, src.raw_data(), src.dtype(), k, bytes, scales.data<float>());
    out[prefix + "scales"] = std::move(scales);
  } else {
    const Shape shape = QuantizedScalesShape(q, k, n);
    CCTUNE_ASSIGN_OR_RETURN(Tensor scales, Tensor::Empty(shape, DType::kBF16, Device::Cpu()));
    CCTUNE_ASSIGN_OR_RETURN(Tensor zeros, Tensor::Empty(shape, DType::kBF16, Device::Cpu()));
    cpu::QuantizeInt4(n, k, q.groupsize, src.raw_data(), src.dtype(), k, bytes,
                      scales.data<bf16>(), zeros.data<bf16>());
    out[prefix + "scales"] = std::move(scales);
    out[prefix + "zeros"] = std::move(zeros);
  }
  out[prefix + "weight"] = std::move(data);
  return absl::OkStatus();
}

}  // namespace

QuantizerRegistryT& QuantizerRegistry() {
  static QuantizerRegistryT* const r = new QuantizerRegistryT("quantizer");
  return *r;
}

absl::Status RegisterQuantizers() {
  static const absl::Status status = [] {
    QuantizerRegistryT& r = QuantizerRegistry();
    CCTUNE_RETURN_IF_ERROR(r.Register(
        kInt8Name,
        Schema("", "int8 weight-only: symmetric, one f32 scale per output channel"),
        [](const ConfigNode&) -> absl::StatusOr<WeightQuantization> {
          return WeightQuantization{QuantFormat::kInt8PerChannel, 0};
        }));
    CCTUNE_RETURN_IF_ERROR(r.Register(
        kInt4Name,
        Schema("", "int4 weight-only: per group of `groupsize` inputs a bf16 scale and zero "
                   "point (torchao's asymmetric scheme), two weights per byte")
            .Default("groupsize", KeyType::Int(), ConfigNode::Int(256),
                     "inputs sharing a scale and zero point: 32, 64, 128 or 256 (any multiple "
                     "of 32 up to 256)")
            .Check("groupsize", GroupsizeKey),
        [](const ConfigNode& node) -> absl::StatusOr<WeightQuantization> {
          CCTUNE_ASSIGN_OR_RETURN(int64_t g, node.GetInt("groupsize"));
          absl::Status s = CheckGroupsize(g);
          if (!s.ok()) {
            return absl::InvalidArgumentError(absl::StrCat("quantizer.", s.message()));
          }
          return WeightQuantization{QuantFormat::kInt4Grouped, g};
        }));
    // torchtune's older spelling (torchtune.utils.quantization.*).
    CCTUNE_RETURN_IF_ERROR(
        r.AddAlias("torchtune.utils.quantization.Int8WeightOnlyQuantizer", kInt8Name));
    CCTUNE_RETURN_IF_ERROR(
        r.AddAlias("torchtune.utils.quantization.Int4WeightOnlyQuantizer", kInt4Name));
    return absl::OkStatus();
  }();
  return status;
}

ProjectionFactory QuantizedProjections(const WeightQuantization& q) {
  return [q](absl::string_view /*name*/, int64_t in_dim, int64_t out_dim,
             bool bias) -> absl::StatusOr<std::unique_ptr<Linear>> {
    return std::make_unique<QuantizedLinear>(in_dim, out_dim, bias, q);
  };
}

absl::StatusOr<std::unique_ptr<TransformerDecoder>> BuildQuantizedModel(
    const ConfigNode& model_node, const ConfigNode& from_checkpoint, const WeightQuantization& q) {
  CCTUNE_ASSIGN_OR_RETURN(DecoderConfig config,
                          ModelConfig(model_node.ComponentName(), model_node, from_checkpoint));
  return BuildDecoder(config, QuantizedProjections(q));
}

absl::StatusOr<StateDict> QuantizeStateDict(const StateDict& full, const Module& quantized_model,
                                            const WeightQuantization& q) {
  StateDict out = full;  // shares every tensor
  for (const auto& [name, p] : quantized_model.NamedParameters()) {
    if (name != "scales" && !absl::EndsWith(name, ".scales")) continue;
    // "<layer>." (or "" for a bare QuantizedLinear).
    const std::string prefix = name.substr(0, name.size() - 6);
    auto it = full.find(prefix + "weight");
    if (it == full.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("quantize: the checkpoint has no ", prefix, "weight to quantize"));
    }
    CCTUNE_RETURN_IF_ERROR(QuantizeInto(prefix, it->second, q, out));
    // A view of a mapped checkpoint: its pages go back to the kernel once quantized (they
    // re-read from the file if touched again), so a quantize-at-load holds the quantized
    // weights plus the tensor in flight, not the full-precision file too (a no-op for other
    // storage).
    const Tensor& w = it->second;
    if (w.storage() != nullptr) {
      w.storage()->ReleasePages(static_cast<size_t>(w.offset()) * DTypeSize(w.dtype()),
                                w.nbytes());
    }
  }
  return out;
}

std::map<std::string, std::string> QuantizationMetadata(const WeightQuantization& q) {
  std::map<std::string, std::string> m{{"quantizer", q.QuantizerName()}};
  if (q.format == QuantFormat::kInt4Grouped) m["groupsize"] = absl::StrCat(q.groupsize);
  return m;
}

absl::StatusOr<std::optional<WeightQuantization>> QuantizationFromMetadata(
    const std::map<std::string, std::string>& metadata, const std::string& source) {
  auto it = metadata.find("quantizer");
  if (it == metadata.end()) return std::optional<WeightQuantization>();
  if (it->second == "Int8WeightOnlyQuantizer") {
    return std::optional<WeightQuantization>(
        WeightQuantization{QuantFormat::kInt8PerChannel, 0});
  }
  if (it->second != "Int4WeightOnlyQuantizer") {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": metadata quantizer '", it->second,
                     "' is not one cctune reads (Int8WeightOnlyQuantizer, "
                     "Int4WeightOnlyQuantizer)"));
  }
  auto g = metadata.find("groupsize");
  int64_t groupsize = 0;
  if (g == metadata.end() || !absl::SimpleAtoi(g->second, &groupsize)) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": an Int4WeightOnlyQuantizer checkpoint needs an integer metadata groupsize, got '",
        g == metadata.end() ? "" : g->second, "'"));
  }
  absl::Status s = CheckGroupsize(groupsize);
  if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat(source, ": metadata ", s.message()));
  return std::optional<WeightQuantization>(WeightQuantization{QuantFormat::kInt4Grouped, groupsize});
}

}  // namespace cctune
