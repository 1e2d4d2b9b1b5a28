#include "modules/embedding.h"

#include "core/status.h"
#include "kernels/ops.h"

namespace cctune {

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim)
    : num_embeddings_(num_embeddings),
      embedding_dim_(embedding_dim),
      weight_(RegisterParameter("weight", {num_embeddings, embedding_dim},
                                ParameterInit::Normal(1.0))) {
  CCTUNE_CHECK(num_embeddings >= 0 && embedding_dim >= 0, "Embedding(", num_embeddings, ", ",
               embedding_dim, ")");
}

absl::Status Embedding::Forward(Tensor& out, const Tensor& ids) const {
  if (!weight_.value.defined()) {
    return absl::FailedPreconditionError(
        "Embedding: parameters are not materialised (create a ParameterArena first)");
  }
  return ops::Embedding(out, weight_.value, ids);
}

absl::Status Embedding::Backward(const Tensor& dy, const Tensor& ids,
                                ActivationStore& store) const {
  Tensor* dw = store.Grad(weight_.value);
  if (dw == nullptr) return absl::OkStatus();
  return ops::EmbeddingBackward(*dw, dy, ids);
}

absl::StatusOr<Tensor> Embedding::operator()(const Tensor& ids) const {
  Shape shape = ids.shape();
  shape.push_back(embedding_dim_);
  CCTUNE_ASSIGN_OR_RETURN(Tensor out,
                          Tensor::Empty(std::move(shape), DType::kF32, weight_.value.device()));
  CCTUNE_RETURN_IF_ERROR(Forward(out, ids));
  return out;
}

}  // namespace cctune
