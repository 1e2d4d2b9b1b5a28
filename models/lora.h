// LoRA variants of the Llama-family builders, as torchtune's lora_* builders: the same decoder
// with LoRALinear (modules/lora_linear.h) in place of the chosen projections.
//
//   LoRAOptions lora;
//   lora.lora_attn_modules = {"q_proj", "v_proj"};
//   CCTUNE_ASSIGN_OR_RETURN(auto model, BuildLoRADecoder(Llama3_2_1BConfig(), lora));
//   ... ParameterArena::Create(*model, ...), load the base checkpoint with strict=false ...
//   CCTUNE_ASSIGN_OR_RETURN(ParameterLayout trainable, LoRATrainableLayout(*model));
//   // grads = ParameterArena::Allocate(trainable, device); DecoderTrainer with
//   // frozen_if_missing = true trains the adapters only.
//
// Parameter names are torchtune's: layers.N.attn.q_proj.weight (frozen base),
// layers.N.attn.q_proj.lora_a.weight [rank, in], layers.N.attn.q_proj.lora_b.weight [out, rank];
// mlp.w1/w2/w3 and output likewise.
#ifndef CCTUNE_MODELS_LORA_H_
#define CCTUNE_MODELS_LORA_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "checkpoint/state_dict.h"
#include "core/dtype.h"
#include "models/decoder_builder.h"
#include "modules/parameters.h"
#include "modules/transformer_decoder.h"
#include "training/optim.h"

namespace cctune {

struct LoRAOptions {
  // Any of q_proj, k_proj, v_proj, output_proj.
  std::vector<std::string> lora_attn_modules = {"q_proj", "v_proj"};
  bool apply_lora_to_mlp = false;     // w1, w2, w3
  bool apply_lora_to_output = false;  // the final projection (not with tied embeddings)
  int64_t lora_rank = 8;
  double lora_alpha = 16.0;
  double lora_dropout = 0.0;
  // QLoRA (torchtune's quantize_base, the qlora_ builders): every attention and MLP base
  // projection is NF4 (LoRALinear(quantize_base) where adapted, FrozenNF4Linear elsewhere,
  // modules/nf4_linear.h); the output (adapted or not, as in torchtune), embeddings and norms
  // stay in the run's dtype.
  bool quantize_base = false;
};

// Projections for BuildDecoder: LoRALinear for those `lora` selects (q_proj, k_proj,
// v_proj, output_proj by lora_attn_modules; w1, w2, w3 by apply_lora_to_mlp; output by
// apply_lora_to_output), Linear for the rest; with quantize_base NF4 bases as above (an
// InvalidArgument naming the projection when its size does not suit NF4). Check the options
// with CheckLoRAOptions first.
ProjectionFactory LoRAProjections(const LoRAOptions& lora);

// InvalidArgument for an unknown attention module name, rank <= 0, a non-finite alpha,
// dropout outside [0, 1), or apply_lora_to_output with tied embeddings.
absl::Status CheckLoRAOptions(const LoRAOptions& lora, const DecoderConfig& config);

// CheckLoRAOptions, then BuildDecoder(config, LoRAProjections(lora)).
absl::StatusOr<std::unique_ptr<TransformerDecoder>> BuildLoRADecoder(const DecoderConfig& config,
                                                                     const LoRAOptions& lora);

// Whether `name` is an adapter parameter ("....lora_a.weight" / "....lora_b.weight").
bool IsLoRAParameter(absl::string_view name);
// The layout of `model`'s adapter parameters only (in model order, in `dtype`): the gradient
// and optimizer-state arenas of a LoRA run.
absl::StatusOr<ParameterLayout> LoRATrainableLayout(const Module& model, DType dtype = DType::kF32);
// Number of adapter parameter elements of `model`.
int64_t NumLoRAParameters(const Module& model);

// Optimizer buffers for a LoRA run: one ParamBuffer per trainable tensor of `grads` (e.g. an
// arena with LoRATrainableLayout), pairing the model's parameter view in `params` with its
// gradient. Adapters are not contiguous in the model's arena, hence one buffer per tensor;
// buffer names are the parameter names with '.' -> '_' (optimizer state
// "layers_0_attn_q_proj_lora_a_weight.exp_avg"). NotFound / InvalidArgument on a name or
// shape mismatch.
absl::StatusOr<std::vector<ParamBuffer>> LoRAParamBuffers(const ParameterArena& params,
                                                          const ParameterArena& grads);

// Folds every adapter of `model` into its base weight (W += alpha/rank · B·A); afterwards the
// model computes what the plain model with BaseStateDict's weights computes.
absl::Status MergeLoRA(TransformerDecoder& model);
// `state_dict` without its adapter entries (the merged model's weights, in torchtune names).
StateDict BaseStateDict(const StateDict& state_dict);

}  // namespace cctune

#endif  // CCTUNE_MODELS_LORA_H_
