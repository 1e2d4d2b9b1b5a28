// Reader for llama2.c checkpoints (karpathy/llama2.c, "legacy" version 0 .bin files):
//   7 x int32 header: dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len
//   (a negative vocab_size means the classifier is stored separately, not shared), then f32
//   weights in this order: token_embedding_table, rms_att_weight (all layers), wq, wk, wv, wo
//   (each for all layers), rms_ffn_weight, w1, w2, w3, rms_final_weight, the legacy RoPE
//   tables freq_cis_real and freq_cis_imag (seq_len * head_size / 2 floats each, skipped),
//   then wcls when the classifier is not shared.
// Every matrix is stored row-major as [out, in] (llama2.c's matmul computes
// out[i] = sum_j w[i * in + j] * x[j]), which is nn.Linear's layout, and q/k rows already
// follow the interleaved-pair RoPE that torchtune uses, so no permutation is needed.
// The weights come back as zero-copy views on a private mapping of the file.
#ifndef CCTUNE_CHECKPOINT_LLAMA2C_H_
#define CCTUNE_CHECKPOINT_LLAMA2C_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "checkpoint/state_dict.h"

namespace cctune {

struct Llama2cHeader {
  int dim = 0;         // d
  int hidden_dim = 0;  // SwiGLU hidden size
  int n_layers = 0;
  int n_heads = 0;     // n_h
  int n_kv_heads = 0;  // n_kv
  int vocab_size = 0;  // v, always positive here
  int seq_len = 0;     // max sequence length
  bool shared_classifier = true;  // the file's vocab_size was positive

  int head_dim() const { return dim / n_heads; }
  // Bytes a file with this header must have.
  int64_t ExpectedFileBytes() const;
};

struct Llama2cLoadOptions {
  // With a shared classifier, also put "output.weight" in the state dict as the same tensor
  // as "tok_embeddings.weight" (a view, no copy). Off: leave it out, as torchtune does for
  // models with tied embeddings.
  bool alias_tied_output = true;
};

struct Llama2cCheckpoint {
  Llama2cHeader config;
  // torchtune names: tok_embeddings.weight [v, d]; per layer i: layers.{i}.sa_norm.scale [d],
  // layers.{i}.attn.q_proj.weight [n_h*h_d, d], k_proj/v_proj [n_kv*h_d, d],
  // output_proj [d, n_h*h_d], layers.{i}.mlp_norm.scale [d], layers.{i}.mlp.w1.weight
  // [hidden, d], w2 [d, hidden], w3 [hidden, d]; norm.scale [d]; output.weight [v, d].
  StateDict state_dict;
};

// Parses and validates the header (the first 28 bytes of `bytes`); `file` names the source.
absl::StatusOr<Llama2cHeader> ParseLlama2cHeader(const void* bytes, size_t size,
                                                 const std::string& file);

// Loads `path`; the file size must match the header exactly.
absl::StatusOr<Llama2cCheckpoint> LoadLlama2c(const std::string& path,
                                              const Llama2cLoadOptions& options = {});

}  // namespace cctune

#endif  // CCTUNE_CHECKPOINT_LLAMA2C_H_
