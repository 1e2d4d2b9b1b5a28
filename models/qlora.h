// QLoRA's model-level steps (models/lora.h LoRAOptions::quantize_base builds the model):
// quantizing a full-precision checkpoint into the NF4 layers' storage while loading, the
// dequantized state dict a checkpoint saves (torchtune saves QLoRA's merged weights in bf16
// from the dequantized NF4 base), and the parameter bytes a model holds, NF4 apart.
//
// An NF4 layer <layer> (FrozenNF4Linear, or LoRALinear with quantize_base) has the parameters
// <layer>.weight (i32 codes [out, in / 8]) and <layer>.nf4.{quantized_scalers,
// quantization_factor, scaler_mean} (modules/nf4_linear.h); a checkpoint has <layer>.weight
// [out, in] in f32/bf16/f16.
#ifndef CCTUNE_MODELS_QLORA_H_
#define CCTUNE_MODELS_QLORA_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "checkpoint/state_dict.h"
#include "core/dtype.h"
#include "modules/module.h"
#include "modules/parameters.h"

namespace cctune {

// The NF4 layers of `model` (their names, "layers.0.attn.q_proj"), in model order.
std::vector<std::string> Nf4Layers(const Module& model);
// Whether parameter `name` is part of an NF4 layer's storage, given its layers.
bool IsNf4Parameter(const std::string& name, const std::vector<std::string>& nf4_layers);

// Quantizes each NF4 layer's full-precision <layer>.weight from `full` into `params` (the
// arena of a model with NF4 layers), one tensor at a time (a view of a mapped checkpoint is
// read in place: no full-precision copy of the model is made). Returns the names of `full`
// it consumed; the caller loads the rest. A mapped checkpoint's pages are released once each
// tensor is quantized (Storage::ReleasePages), so at most one tensor's stay resident. Errors name the tensor (missing, wrong shape or
// dtype, a size NF4 cannot hold, non-finite values).
absl::StatusOr<std::vector<std::string>> QuantizeNf4Weights(const StateDict& full,
                                                            const std::vector<std::string>& nf4_layers,
                                                            ParameterArena& params);

// `state_dict` (an arena's export) with each NF4 layer's four tensors replaced by its
// dequantized <layer>.weight [out, in] in `dtype` (f32 or bf16; new CPU tensors); the rest
// shared.
absl::StatusOr<StateDict> DequantizedStateDict(const StateDict& state_dict,
                                               const std::vector<std::string>& nf4_layers,
                                               DType dtype);

// Bytes of a model's parameters in an arena of default dtype `dtype` (what ParameterArena
// would allocate; counted from the declarations, so a meta-built 70B model is counted too).
struct ParameterBytes {
  int64_t nf4 = 0;       // NF4 codes and scales
  int64_t adapters = 0;  // lora_a / lora_b
  int64_t other = 0;     // embeddings, norms, plain projections, biases
  int64_t nf4_elements = 0;  // weight elements held in NF4
  int64_t total() const { return nf4 + adapters + other; }
};
ParameterBytes CountParameterBytes(const Module& model, DType dtype);

}  // namespace cctune

#endif  // CCTUNE_MODELS_QLORA_H_
