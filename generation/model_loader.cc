#include "generation/model_loader.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/llama2c.h"
#include "core/status.h"
#include "models/llama2c/llama2c.h"
#include "models/registry.h"
#include "modules/rotary_positional_embeddings.h"

namespace cctune {

absl::StatusOr<ParameterArena> LoadWeights(TransformerDecoder& model, const StateDict& state_dict,
                                           DType dtype, const Device& device,
                                           bool view_checkpoint, bool view_mapped_files) {
  CCTUNE_ASSIGN_OR_RETURN(ParameterLayout layout, ParameterLayout::FromModule(model, dtype));
  const StateDict* sd = &state_dict;
  StateDict pruned;
  auto out = state_dict.find("output.weight");
  auto emb = state_dict.find("tok_embeddings.weight");
  if (layout.Find("output.weight") == nullptr && out != state_dict.end() &&
      emb != state_dict.end() && out->second.SharesStorageWith(emb->second) &&
      out->second.offset() == emb->second.offset()) {
    pruned = state_dict;
    pruned.erase("output.weight");
    sd = &pruned;
  }
  if (view_checkpoint) {
    return ParameterArena::CreateViewing(model, *sd, dtype, device, view_mapped_files);
  }
  CCTUNE_ASSIGN_OR_RETURN(ParameterArena arena, ParameterArena::Create(model, dtype, device));
  CCTUNE_RETURN_IF_ERROR(arena.LoadStateDict(*sd, /*strict=*/true).status());
  return arena;
}

bool UseHalfSplitRope(TransformerDecoder& model) {
  std::vector<RotaryPositionalEmbeddings*> ropes;
  for (size_t i = 0; i < model.num_layers(); ++i) {
    RotaryPositionalEmbeddings* rope = model.layer(i).attn().pos_embeddings();
    if (rope == nullptr) continue;
    // Half-split of its own accord: it would need the permuted weights.
    if (rope->pairing() != ops::RopePairing::kInterleaved) return false;
    if (std::find(ropes.begin(), ropes.end(), rope) == ropes.end()) ropes.push_back(rope);
  }
  for (RotaryPositionalEmbeddings* rope : ropes) rope->set_pairing(ops::RopePairing::kHalfSplit);
  return true;
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
