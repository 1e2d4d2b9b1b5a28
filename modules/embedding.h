// Embedding: a lookup table [num_embeddings, embedding_dim] (torchtune's nn.Embedding).
#ifndef CCTUNE_MODULES_EMBEDDING_H_
#define CCTUNE_MODULES_EMBEDDING_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "modules/activation_store.h"
#include "modules/module.h"

namespace cctune {

class Embedding : public Module {
 public:
  // Parameter "weight" [num_embeddings, embedding_dim], initialised N(0, 1) like nn.Embedding.
  Embedding(int64_t num_embeddings, int64_t embedding_dim);

  int64_t num_embeddings() const { return num_embeddings_; }
  int64_t embedding_dim() const { return embedding_dim_; }
  const Tensor& weight() const { return weight_.value; }  // [v, d]

  // out [..., d] (any float dtype) = weight[ids [...]]; ids i32/i64 in [0, v).
  absl::Status Forward(Tensor& out, const Tensor& ids) const;
  // weight's gradient += the rows of dy [..., d] (f32) scattered to ids; nothing when frozen.
  absl::Status Backward(const Tensor& dy, const Tensor& ids, ActivationStore& store) const;
  // A new f32 [..., d] on the table's device.
  absl::StatusOr<Tensor> operator()(const Tensor& ids) const;

 private:
  int64_t num_embeddings_;
  int64_t embedding_dim_;
  Parameter& weight_;
};

}  // namespace cctune

#endif  // CCTUNE_MODULES_EMBEDDING_H_
