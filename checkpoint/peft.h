// LoRA adapters in Hugging Face PEFT's layout, as torchtune's checkpointers save them
// (tune_to_peft_adapter_weights / tune_to_peft_adapter_config):
//   <dir>/adapter_model.safetensors
//       base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight  [rank, in]
//       base_model.model.model.layers.N.self_attn.q_proj.lora_B.weight  [out, rank]
//       ... mlp.gate_proj / down_proj / up_proj, self_attn.o_proj, lm_head ...
//   <dir>/adapter_config.json
//       {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": 8, "lora_alpha": 16,
//        "target_modules": ["q_proj", "v_proj"], "base_model_name_or_path": ..., ...}
// With permute_qk (models loaded from HF with permuted q/k rows, i.e. interleaved RoPE) the
// rows of q_proj/k_proj lora_B are permuted per head back to HF's half-split order, as
// torchtune's _permute_lora_matrix does; lora_A is never permuted (its rows are rank).
// Merged full weights go through checkpoint/hf.h SaveHfCheckpoint (see models/lora.h
// MergeLoRA and BaseStateDict). Every file is written atomically.
#ifndef CCTUNE_CHECKPOINT_PEFT_H_
#define CCTUNE_CHECKPOINT_PEFT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "checkpoint/hf.h"
#include "checkpoint/state_dict.h"

namespace cctune {

constexpr char kPeftAdapterWeightsFile[] = "adapter_model.safetensors";
constexpr char kPeftAdapterConfigFile[] = "adapter_config.json";

struct PeftAdapterConfig {
  int64_t r = 8;
  double lora_alpha = 16.0;
  double lora_dropout = 0.0;
  // torchtune module names: q_proj, k_proj, v_proj, output_proj, w1, w2, w3, output.
  std::vector<std::string> target_modules;
  std::string base_model_name_or_path;  // omitted from the JSON when empty
};

struct PeftOptions {
  bool permute_qk = true;  // must match how the base model was loaded (checkpoint/hf.h)
};

// torchtune module name -> PEFT target module (output_proj -> o_proj, w1 -> gate_proj,
// w2 -> down_proj, w3 -> up_proj, output -> lm_head); InvalidArgument for others.
absl::StatusOr<std::string> TuneToPeftTargetModule(absl::string_view tune_module);
// The torchtune target modules that `adapters` holds adapters for (sorted, unique), e.g.
// {"q_proj", "v_proj"} from layers.N.attn.{q,v}_proj.lora_{a,b}.weight.
std::vector<std::string> LoRATargetModules(const StateDict& adapters);

// Adapter tensors, torchtune names -> PEFT names (and q/k lora_B permuted). Entries that are not
// adapters (no ".lora_a."/".lora_b.") are skipped; names outside checkpoint/hf.h's mapping are
// NotFound. `config` supplies n_h, n_kv and h_d.
absl::StatusOr<StateDict> TuneToPeftAdapterWeights(const StateDict& adapters,
                                                   const HfModelConfig& config,
                                                   const PeftOptions& options = {});
// The inverse: PEFT names -> torchtune names, q/k lora_B permuted back.
absl::StatusOr<StateDict> PeftToTuneAdapterWeights(const StateDict& peft,
                                                   const HfModelConfig& config,
                                                   const PeftOptions& options = {});

// adapter_config.json text (target modules in PEFT spelling).
absl::StatusOr<std::string> PeftAdapterConfigJson(const PeftAdapterConfig& config);
// Parses adapter_config.json; target_modules come back in torchtune spelling.
absl::StatusOr<PeftAdapterConfig> ParsePeftAdapterConfig(absl::string_view json,
                                                         absl::string_view file = "<memory>");

// Writes <dir>/adapter_model.safetensors and <dir>/adapter_config.json (dir created if
// missing), each atomically. `adapters` may be a whole model state dict: only adapter entries
// are written. InvalidArgument when there is none, or when a lora_a's rank differs from
// adapter_config.r.
absl::Status SavePeftAdapter(const std::string& dir, const StateDict& adapters,
                             const PeftAdapterConfig& adapter_config,
                             const HfModelConfig& model_config, const PeftOptions& options = {});

struct PeftAdapter {
  PeftAdapterConfig config;
  StateDict state_dict;  // torchtune names (copies, CPU, the file's dtype)
};
// Reads what SavePeftAdapter (or PEFT's save_pretrained for a Llama model) writes.
absl::StatusOr<PeftAdapter> LoadPeftAdapter(const std::string& dir, const HfModelConfig& model_config,
                                            const PeftOptions& options = {});

}  // namespace cctune

#endif  // CCTUNE_CHECKPOINT_PEFT_H_
