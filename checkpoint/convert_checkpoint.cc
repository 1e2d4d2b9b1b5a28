// Converts checkpoints between formats, all through the torchtune-named state dict:
//   convert_checkpoint --from_llama2c=MODEL.bin --to_hf=DIR [--dtype=bf16] [--max_shard_mb=N]
//   convert_checkpoint --from_hf=DIR --to_hf=DIR2 [--dtype=...] [--max_shard_mb=N]
// --permute_qk=0 skips the q/k RoPE-layout permutation.
// A llama2.c model becomes a LlamaForCausalLM checkpoint that transformers loads (q/k rows are
// permuted from llama2.c's interleaved RoPE layout to HF's half-split layout).
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/hf.h"
#include "checkpoint/llama2c.h"
#include "core/status.h"

namespace cctune {
namespace {

HfModelConfig HfConfigFromLlama2c(const Llama2cHeader& c) {
  HfModelConfig h;
  h.vocab_size = c.vocab_size;
  h.hidden_size = c.dim;
  h.intermediate_size = c.hidden_dim;
  h.num_hidden_layers = c.n_layers;
  h.num_attention_heads = c.n_heads;
  h.num_key_value_heads = c.n_kv_heads;
  h.head_dim = c.head_dim();
  h.max_position_embeddings = c.seq_len;
  h.rms_norm_eps = 1e-5;   // llama2.c's run.c
  h.rope_theta = 10000.0;  // llama2.c's run.c
  h.tie_word_embeddings = c.shared_classifier;
  return h;
}

absl::Status Run(const std::map<std::string, std::string>& flags) {
  auto get = [&](const std::string& k) {
    auto it = flags.find(k);
    return it == flags.end() ? std::string() : it->second;
  };
  const std::string to_hf = get("to_hf");
  if (to_hf.empty()) return absl::InvalidArgumentError("--to_hf=DIR is required");
  HfSaveOptions save;
  if (!get("dtype").empty()) {
    CCTUNE_ASSIGN_OR_RETURN(DType t, ParseDType(get("dtype")));
    save.dtype = t;
  }
  if (!get("max_shard_mb").empty()) {
    int64_t mb = 0;
    if (!absl::SimpleAtoi(get("max_shard_mb"), &mb) || mb <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--max_shard_mb must be a positive integer, got '", get("max_shard_mb"), "'"));
    }
    save.max_shard_bytes = static_cast<uint64_t>(mb) << 20;
  }
  // --permute_qk=0 writes q/k rows as they are (for a model that used half-split RoPE).
  save.permute_qk = get("permute_qk") != "0";
  StateDict sd;
  HfModelConfig config;
  if (!get("from_llama2c").empty()) {
    Llama2cLoadOptions opt;
    opt.alias_tied_output = false;
    CCTUNE_ASSIGN_OR_RETURN(Llama2cCheckpoint ck, LoadLlama2c(get("from_llama2c"), opt));
    sd = std::move(ck.state_dict);
    config = HfConfigFromLlama2c(ck.config);
  } else if (!get("from_hf").empty()) {
    HfLoadOptions opt;
    opt.alias_tied_output = false;
    opt.permute_qk = save.permute_qk;
    CCTUNE_ASSIGN_OR_RETURN(HfCheckpoint ck, LoadHfCheckpoint(get("from_hf"), opt));
    sd = std::move(ck.state_dict);
    config = std::move(ck.config);
  } else {
    return absl::InvalidArgumentError("one of --from_llama2c=FILE or --from_hf=DIR is required");
  }
  CCTUNE_RETURN_IF_ERROR(SaveHfCheckpoint(to_hf, sd, config, save));
  std::printf("wrote %zu tensors (%.1f MB) to %s\n", sd.size(), StateDictBytes(sd) / 1e6,
              to_hf.c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace cctune

int main(int argc, char** argv) {
  std::map<std::string, std::string> flags;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const size_t eq = arg.find('=');
    if (!absl::StartsWith(arg, "--") || eq == std::string::npos) {
      std::fprintf(stderr, "usage: %s --from_llama2c=FILE|--from_hf=DIR --to_hf=DIR "
                   "[--dtype=fp32|bf16|fp16] [--max_shard_mb=N] [--permute_qk=0]\n", argv[0]);
      return 2;
    }
    flags[arg.substr(2, eq - 2)] = arg.substr(eq + 1);
  }
  const absl::Status s = cctune::Run(flags);
  if (!s.ok()) {
    std::fprintf(stderr, "convert_checkpoint: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}
