#include "generation/model_loader.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "checkpoint/llama2c.h"
#include "core/status.h"
#include "models/llama2c/llama2c.h"
#include "models/registry.h"

namespace cctune {

absl::StatusOr<ParameterArena> LoadWeights(TransformerDecoder& model, const StateDict& state_dict,
                                           DType dtype, const Device& device) {
  CCTUNE_ASSIGN_OR_RETURN(ParameterArena arena, ParameterArena::Create(model, dtype, device));
  const StateDict* sd = &state_dict;
  StateDict pruned;
  auto out = state_dict.find("output.weight");
  auto emb = state_dict.find("tok_embeddings.weight");
  if (arena.layout().Find("output.weight") == nullptr && out != state_dict.end() &&
      emb != state_dict.end() && out->second.SharesStorageWith(emb->second) &&
      out->second.offset() == emb->second.offset()) {
    pruned = state_dict;
    pruned.erase("output.weight");
    sd = &pruned;
  }
  CCTUNE_RETURN_IF_ERROR(arena.LoadStateDict(*sd, /*strict=*/true).status());
  return arena;
}

absl::StatusOr<ConfigNode> Llama2cModelArgs(const std::string& bin_path) {
  // Only the header is needed, but LoadLlama2c also checks the file size against it and
  // merely maps the weights.
  CCTUNE_ASSIGN_OR_RETURN(Llama2cCheckpoint ck, LoadLlama2c(bin_path));
  return Llama2cBuilderArgs(ck.config);
}

absl::StatusOr<LoadedModel> LoadLlama2cModel(const std::string& bin_path, DType dtype,
                                             const Device& device) {
  CCTUNE_ASSIGN_OR_RETURN(Llama2cCheckpoint ck, LoadLlama2c(bin_path));
  LoadedModel loaded;
  CCTUNE_ASSIGN_OR_RETURN(
      loaded.model,
      BuildModel("cctune.models.llama2c.llama2c", ConfigNode(), Llama2cBuilderArgs(ck.config)));
  CCTUNE_ASSIGN_OR_RETURN(loaded.arena, LoadWeights(*loaded.model, ck.state_dict, dtype, device));
  return loaded;
}

}  // namespace cctune
