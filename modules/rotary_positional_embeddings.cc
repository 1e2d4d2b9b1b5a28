#include "modules/rotary_positional_embeddings.h"

#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "kernels/ops.h"

namespace cctune {

RotaryPositionalEmbeddings::RotaryPositionalEmbeddings(int64_t dim, int64_t max_seq_len,
                                                       double base, ops::RopePairing pairing,
                                                       std::optional<ops::RopeScaling> scaling)
    : dim_(dim), max_seq_len_(max_seq_len), base_(base), pairing_(pairing), scaling_(scaling) {
  CCTUNE_CHECK(dim > 0 && dim % 2 == 0, "RotaryPositionalEmbeddings: dim (", dim,
               ") must be positive and even");
  CCTUNE_CHECK(max_seq_len > 0, "RotaryPositionalEmbeddings: max_seq_len (", max_seq_len,
               ") must be positive");
}

absl::Status RotaryPositionalEmbeddings::Setup(const Device& device) {
  if (device.is_meta()) return absl::OkStatus();
  if (cos_.defined() && cos_.device() == device) return absl::OkStatus();
  CCTUNE_ASSIGN_OR_RETURN(
      Tensor inv_freq,
      ops::RopeInvFrequencies(dim_, base_, scaling_.has_value() ? &*scaling_ : nullptr));
  CCTUNE_ASSIGN_OR_RETURN(inv_freq, inv_freq.To(device));
  CCTUNE_ASSIGN_OR_RETURN(Tensor cos, Tensor::Empty({max_seq_len_, dim_ / 2}, DType::kF32, device));
  CCTUNE_ASSIGN_OR_RETURN(Tensor sin, Tensor::Empty({max_seq_len_, dim_ / 2}, DType::kF32, device));
  CCTUNE_RETURN_IF_ERROR(ops::RopeCache(cos, sin, inv_freq));
  std::vector<int64_t> pos(max_seq_len_);
  std::iota(pos.begin(), pos.end(), 0);
  CCTUNE_ASSIGN_OR_RETURN(Tensor positions, Tensor::FromVector(pos, {max_seq_len_}));
  CCTUNE_ASSIGN_OR_RETURN(positions, positions.To(device));
  cos_ = std::move(cos);
  sin_ = std::move(sin);
  positions_ = std::move(positions);
  return absl::OkStatus();
}

absl::Status RotaryPositionalEmbeddings::Forward(Tensor& out, const Tensor& x,
                                                 const Tensor* input_pos) {
  if (x.dim() != 4 || x.size(3) != dim_) {
    return absl::InvalidArgumentError(
        absl::StrCat("RotaryPositionalEmbeddings: x must be [b, s, n, ", dim_, "], got ",
                     ShapeToString(x.shape())));
  }
  CCTUNE_ASSIGN_OR_RETURN(Tensor pos, Positions(x, input_pos));
  return ops::Rope(out, x, cos_, sin_, pos, pairing_);
}

absl::Status RotaryPositionalEmbeddings::Backward(Tensor& dx, const Tensor& dy,
                                                  const Tensor* input_pos) {
  if (dy.dim() != 4 || dy.size(3) != dim_) {
    return absl::InvalidArgumentError(
        absl::StrCat("RotaryPositionalEmbeddings: dy must be [b, s, n, ", dim_, "], got ",
                     ShapeToString(dy.shape())));
  }
  CCTUNE_ASSIGN_OR_RETURN(Tensor pos, Positions(dy, input_pos));
  return ops::RopeBackward(dx, dy, cos_, sin_, pos, pairing_);
}

absl::StatusOr<Tensor> RotaryPositionalEmbeddings::Positions(const Tensor& x,
                                                             const Tensor* input_pos) {
  CCTUNE_RETURN_IF_ERROR(Setup(x.device()));
  if (input_pos != nullptr) return *input_pos;
  const int64_t s = x.size(1);
  if (s > max_seq_len_) {
    return absl::InvalidArgumentError(absl::StrCat("RotaryPositionalEmbeddings: seq_len (", s,
                                                   ") exceeds max_seq_len (", max_seq_len_, ")"));
  }
  return positions_.Narrow(0, 0, s);
}

}  // namespace cctune
