// Hugging Face checkpoints of Llama-family models (Llama 2/3, Mistral, Qwen2-style biases),
// loaded and saved the way torchtune's FullModelHFCheckpointer does:
//   <dir>/config.json
//   <dir>/model.safetensors                      (one file), or
//   <dir>/model-0000k-of-0000n.safetensors + <dir>/model.safetensors.index.json (sharded).
// Names map HF <-> torchtune (model.layers.N.self_attn.q_proj.weight <->
// layers.N.attn.q_proj.weight, mlp.gate_proj <-> mlp.w1, up_proj <-> w3, down_proj <-> w2,
// input_layernorm <-> sa_norm.scale, post_attention_layernorm <-> mlp_norm.scale, ...).
//
// RoPE layout: HF stores q/k projection rows per head as [first halves | second halves]
// (rotate_half RoPE); Meta / torchtune / llama2.c rotate interleaved pairs. With
// permute_qk (the default) q/k weights and biases are permuted on load so a model using
// interleaved RoPE gives the same results, and permuted back on save. A model that applies
// half-split RoPE (e.g. torchtune's Qwen2) loads with permute_qk = false.
#ifndef CCTUNE_CHECKPOINT_HF_H_
#define CCTUNE_CHECKPOINT_HF_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "checkpoint/state_dict.h"
#include "core/dtype.h"
#include "core/tensor.h"

namespace cctune {

// The fields of config.json that loading and saving use. Everything else in the file is kept
// in raw_json and written back unchanged on save.
struct HfModelConfig {
  std::string model_type = "llama";
  std::vector<std::string> architectures = {"LlamaForCausalLM"};
  int64_t vocab_size = 0;           // v
  int64_t hidden_size = 0;          // d
  int64_t intermediate_size = 0;    // SwiGLU hidden size
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;  // n_h
  int64_t num_key_value_heads = 0;  // n_kv (config default: n_h)
  int64_t head_dim = 0;             // h_d (config default: d / n_h)
  int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;  // Llama "attention_bias" (with o_bias), always on for qwen2
  bool o_bias = false;
  bool mlp_bias = false;  // Llama "mlp_bias"
  std::string dtype = "float32";  // "torch_dtype" (or "dtype" in newer transformers)
  std::string raw_json;           // config.json as read; empty for a config built in code

  // Positive sizes, n_h divisible by n_kv, even h_d.
  absl::Status Validate() const;
  // config.json text: raw_json with the fields above written over it, or a new
  // LlamaForCausalLM config when raw_json is empty.
  absl::StatusOr<std::string> ToJson() const;
};

absl::StatusOr<HfModelConfig> ParseHfConfig(absl::string_view json,
                                            const std::string& file = "config.json");
absl::StatusOr<HfModelConfig> ReadHfConfig(const std::string& dir);

// HF name -> torchtune name. "" for tensors torchtune drops (rotary_emb.inv_freq); NotFound
// for names outside the mapping.
absl::StatusOr<std::string> HfToTuneName(absl::string_view hf_name);
// torchtune name -> HF name; NotFound for names outside the mapping.
absl::StatusOr<std::string> TuneToHfName(absl::string_view tune_name);

// The torchtune names (with shapes) a model with this config has.
absl::StatusOr<std::vector<std::pair<std::string, Shape>>> ExpectedTuneTensors(
    const HfModelConfig& config, bool include_tied_output = false);

// Row permutations of a q/k projection weight [n_heads * head_dim, d] or bias
// [n_heads * head_dim]: within each head, HF's [x_0..x_{h/2-1} | y_0..y_{h/2-1}] becomes
// interleaved [x_0, y_0, x_1, y_1, ...] (torchtune's view(n, 2, h/2, d).transpose(1, 2)),
// and back. Always a new contiguous CPU tensor of the same dtype (device inputs are copied).
absl::StatusOr<Tensor> PermuteHfToInterleaved(const Tensor& t, int64_t n_heads,
                                              int64_t head_dim);
absl::StatusOr<Tensor> PermuteInterleavedToHf(const Tensor& t, int64_t n_heads,
                                              int64_t head_dim);

struct HfConvertOptions {
  bool permute_qk = true;  // see the file comment
};

// Whole state dicts, HF <-> torchtune. Renames, permutes q/k, checks names and shapes against
// the config, reporting missing and unexpected tensors by name. Unpermuted tensors are
// passed through as they are (views stay views).
absl::StatusOr<StateDict> HfToTune(const StateDict& hf, const HfModelConfig& config,
                                   const HfConvertOptions& options = {});
absl::StatusOr<StateDict> TuneToHf(const StateDict& tune, const HfModelConfig& config,
                                   const HfConvertOptions& options = {});

struct HfLoadOptions {
  bool permute_qk = true;
  // Convert every tensor to this dtype (copies); unset keeps the file's dtype, and then
  // tensors that need no permutation are zero-copy views on the mapped files.
  std::optional<DType> dtype;
  // With tied embeddings, also expose "output.weight" as the same tensor as
  // "tok_embeddings.weight". Off: leave it out, as torchtune does.
  bool alias_tied_output = true;
};

struct HfCheckpoint {
  HfModelConfig config;
  StateDict state_dict;            // torchtune names
  std::vector<std::string> files;  // the safetensors files read
};

// Loads <dir>: config.json plus model.safetensors or the sharded files named by
// model.safetensors.index.json (every named file must exist, and the index and the files
// must agree tensor by tensor).
absl::StatusOr<HfCheckpoint> LoadHfCheckpoint(const std::string& dir,
                                              const HfLoadOptions& options = {});

struct HfSaveOptions {
  bool permute_qk = true;  // must match how the state dict was loaded
  // Largest shard; tensors go to shards greedily in model order (a tensor larger than this
  // gets a shard of its own). One shard is written as model.safetensors without an index.
  uint64_t max_shard_bytes = uint64_t{5} << 30;
  std::optional<DType> dtype;  // convert on save (config.json's dtype follows)
};

// Writes config.json, the shard(s) and, when sharded, model.safetensors.index.json into
// `dir` (created if missing), each atomically. Stale model*.safetensors files from an earlier
// save into the same directory are removed afterwards. With tie_word_embeddings,
// output.weight is not written.
absl::Status SaveHfCheckpoint(const std::string& dir, const StateDict& state_dict,
                              const HfModelConfig& config, const HfSaveOptions& options = {});

}  // namespace cctune

#endif  // CCTUNE_CHECKPOINT_HF_H_
