#include "generation/test_models.h"

#include <cmath>

#include "absl/strings/match.h"
#include "core/random.h"
#include "core/status.h"
#include "models/tiny/tiny.h"

namespace cctune {
namespace testing {

absl::StatusOr<LoadedModel> RandomModel(const RandomModelSpec& spec) {
  LoadedModel m;
  CCTUNE_ASSIGN_OR_RETURN(
      m.model,
      TinyLlama(spec.vocab_size, spec.num_layers, spec.num_heads, spec.num_kv_heads, spec.embed_dim,
                spec.intermediate_dim, spec.max_seq_len, spec.tie_word_embeddings));
  CCTUNE_ASSIGN_OR_RETURN(m.arena, ParameterArena::Create(*m.model, spec.dtype, Device::Cpu()));
  Generator gen(spec.seed);
  for (const auto& [name, view] : m.arena.named_tensors()) {
    Tensor t = view;
    if (absl::EndsWith(name, ".scale")) {  // RMSNorm
      CCTUNE_RETURN_IF_ERROR(FillUniform(t, 0.8, 1.2, gen));
    } else if (name == "tok_embeddings.weight") {
      CCTUNE_RETURN_IF_ERROR(FillNormal(t, 0.0, 1.0, gen));
    } else {  // [out, in] projections
      const double fan_in = static_cast<double>(t.size(-1));
      CCTUNE_RETURN_IF_ERROR(FillNormal(t, 0.0, 1.5 / std::sqrt(fan_in), gen));
    }
  }
  return m;
}

}  // namespace testing
}  // namespace cctune
