#include "distributed/fsdp.h"

#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/dtype.h"
#include "core/status.h"

namespace cctune {

namespace {

absl::Status ZeroTensor(Tensor& t) {
  if (t.numel() == 0 || t.device().is_meta()) return absl::OkStatus();
  if (t.device().is_cpu()) {
    std::memset(t.raw_data(), 0, t.nbytes());
    return absl::OkStatus();
  }
  CCTUNE_ASSIGN_OR_RETURN(Tensor zeros, Tensor::Zeros(t.shape(), t.dtype()));
  return t.CopyFrom(zeros);
}

}  // namespace

int64_t ShardNumel(int64_t numel, int world_size) {
  return world_size <= 1 ? numel : (numel + world_size - 1) / world_size;
}

absl::StatusOr<double> AllReduceScalar(ProcessGroup& pg, double v, ReduceOp op) {
  const int n = pg.world_size();
  int64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(bits));
  CCTUNE_ASSIGN_OR_RETURN(Tensor mine, Tensor::Empty({1}, DType::kI64));
  mine.data<int64_t>()[0] = bits;
  CCTUNE_ASSIGN_OR_RETURN(Tensor all, Tensor::Empty({n}, DType::kI64));
  CCTUNE_RETURN_IF_ERROR(pg.AllGather(mine, all));
  double acc = 0;
  for (int r = 0; r < n; ++r) {
    double x = 0;
    std::memcpy(&x, all.data<int64_t>() + r, sizeof(x));
    if (op == ReduceOp::kMax) {
      acc = r == 0 ? x : std::fmax(acc, x);
    } else {
      acc += x;
    }
  }
  return op == ReduceOp::kAvg ? acc / n : acc;
}

absl::Status PadArenaForSharding(Module& model, int world_size, ParameterArena& params) {
  const ParameterLayout padded = params.layout().PadBuffersTo(world_size);
  bool same = true;
  for (size_t b = 0; b < padded.buffers().size(); ++b) {
    same = same && padded.buffers()[b].numel == params.layout().buffers()[b].numel;
  }
  if (same) return absl::OkStatus();
  CCTUNE_ASSIGN_OR_RETURN(ParameterArena copy, ParameterArena::Allocate(padded, params.device()));
  for (size_t b = 0; b < params.buffers().size(); ++b) {
    const Tensor& src = params.buffers()[b];
    CCTUNE_ASSIGN_OR_RETURN(Tensor dst, copy.buffers()[b].Narrow(0, 0, src.numel()));
    CCTUNE_RETURN_IF_ERROR(dst.CopyFrom(src));
  }
  CCTUNE_RETURN_IF_ERROR(copy.Bind(model));
  params = std::move(copy);
  return absl::OkStatus();
}

absl::StatusOr<ShardedArena> ShardedArena::Create(ProcessGroup* pg, const ParameterArena& params,
                                                  const ParameterArena& grads) {
  const int n = pg->world_size();
  const std::vector<Tensor>& p = params.buffers();
  const std::vector<Tensor>& g = grads.buffers();
  if (p.size() != g.size()) {
    return absl::InvalidArgumentError(absl::StrCat("sharding: the parameter arena has ", p.size(),
                                                   " buffers and the gradient arena ", g.size()));
  }
  ShardedArena s;
  s.pg_ = pg;
  s.params_ = p;
  s.grads_ = g;
  for (size_t b = 0; b < p.size(); ++b) {
    if (p[b].numel() != g[b].numel() || p[b].numel() % n != 0 || g[b].dtype() != DType::kF32) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sharding: buffer ", b, " has ", p[b].numel(), " parameters and ", g[b].numel(),
          " gradient elements (", DTypeName(g[b].dtype()), "); both must be the same multiple of ",
          n, " ranks, the gradients f32"));
    }
    const int64_t c = p[b].numel() / n;
    CCTUNE_ASSIGN_OR_RETURN(Tensor shard_grad, Tensor::Zeros({c}, DType::kF32, g[b].device()));
    CCTUNE_ASSIGN_OR_RETURN(Tensor shard_param, p[b].Narrow(0, pg->rank() * c, c));
    CCTUNE_ASSIGN_OR_RETURN(Tensor staging, Tensor::Empty({c}, p[b].dtype(), p[b].device()));
    s.shard_grads_.push_back(std::move(shard_grad));
    s.shard_params_.push_back(std::move(shard_param));
    s.staging_.push_back(std::move(staging));
  }
  return s;
}

int64_t ShardedArena::ShardGradientBytes() const {
  int64_t bytes = 0;
  for (const Tensor& t : shard_grads_) bytes += static_cast<int64_t>(t.nbytes());
  return bytes;
}

std::vector<ParamBuffer> ShardedArena::OptimizerBuffers() const {
  std::vector<ParamBuffer> out;
  for (int b = 0; b < num_buffers(); ++b) {
    out.push_back({absl::StrCat("buffer", b, "_", DTypeName(shard_params_[b].dtype())),
                   shard_params_[b], shard_grads_[b]});
  }
  return out;
}

absl::Status ShardedArena::ReduceScatterGradients() {
  for (int b = 0; b < num_buffers(); ++b) {
    Tensor& full = grads_[b];
    CCTUNE_RETURN_IF_ERROR(pg_->ReduceScatter(full, shard_grads_[b], ReduceOp::kSum));
    CCTUNE_RETURN_IF_ERROR(ZeroTensor(full));
  }
  return absl::OkStatus();
}

absl::Status ShardedArena::AllGatherParameters() {
  for (int b = 0; b < num_buffers(); ++b) {
    CCTUNE_RETURN_IF_ERROR(staging_[b].CopyFrom(shard_params_[b]));
    Tensor& full = params_[b];
    CCTUNE_RETURN_IF_ERROR(pg_->AllGather(staging_[b], full));
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> ReshardTensor(const std::vector<Tensor>& old_shards, int64_t shard_numel,
                                     int rank, int world_size) {
  if (old_shards.empty()) return absl::InvalidArgumentError("reshard: no shards");
  const int64_t old_numel = old_shards[0].numel();
  std::vector<float> all;
  all.reserve(static_cast<size_t>(old_numel) * old_shards.size());
  for (size_t r = 0; r < old_shards.size(); ++r) {
    const Tensor& t = old_shards[r];
    if (t.dtype() != DType::kF32 || t.numel() != old_numel) {
      return absl::InvalidArgumentError(absl::StrCat(
          "reshard: shard ", r, " is ", DTypeName(t.dtype()), " [", t.numel(), "], shard 0 f32 [",
          old_numel, "]"));
    }
    CCTUNE_ASSIGN_OR_RETURN(std::vector<float> v, t.ToFloatVector());
    all.insert(all.end(), v.begin(), v.end());
  }
  // What no new shard covers must be padding.
  for (size_t i = static_cast<size_t>(shard_numel) * world_size; i < all.size(); ++i) {
    if (all[i] != 0.0f) {
      return absl::InvalidArgumentError(absl::StrCat(
          "reshard: element ", i, " of the saved shards (", all[i], ") lies past the ",
          shard_numel * world_size, " elements of ", world_size, " shards of ", shard_numel));
    }
  }
  CCTUNE_ASSIGN_OR_RETURN(Tensor out, Tensor::Zeros({shard_numel}, DType::kF32));
  float* o = out.data<float>();
  const int64_t begin = static_cast<int64_t>(rank) * shard_numel;
  for (int64_t i = 0; i < shard_numel && begin + i < static_cast<int64_t>(all.size()); ++i) {
    o[i] = all[static_cast<size_t>(begin + i)];
  }
  return out;
}

absl::StatusOr<OptimizerState> ReshardOptimizerState(
    const std::vector<OptimizerState>& old_states,
    const std::map<std::string, int64_t>& shard_numel, int rank, int world_size) {
  if (old_states.empty()) return absl::InvalidArgumentError("reshard: no optimizer states");
  const OptimizerState& first = old_states[0];
  for (size_t r = 1; r < old_states.size(); ++r) {
    const OptimizerState& s = old_states[r];
    bool same = s.name == first.name && s.step == first.step && s.tensors.size() == first.tensors.size();
    for (const auto& [name, t] : first.tensors) same = same && s.tensors.count(name) == 1;
    if (!same) {
      return absl::InvalidArgumentError(absl::StrCat(
          "reshard: the optimizer state of rank ", r, " (", s.name, ", step ", s.step, ", ",
          s.tensors.size(), " tensors) does not match rank 0's (", first.name, ", step ",
          first.step, ", ", first.tensors.size(), " tensors)"));
    }
  }
  if (static_cast<int>(old_states.size()) == world_size) return old_states[rank];
  OptimizerState out;
  out.name = first.name;
  out.step = first.step;
  out.hyperparameters = first.hyperparameters;
  for (const auto& [name, t] : first.tensors) {
    const std::string buffer = name.substr(0, name.find('.'));
    auto it = shard_numel.find(buffer);
    if (it == shard_numel.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "reshard: optimizer tensor ", name, " is of buffer ", buffer, ", which this model lacks"));
    }
    if (t.dtype() != DType::kF32) {
      return absl::UnimplementedError(absl::StrCat(
          "reshard: optimizer tensor ", name, " is ", DTypeName(t.dtype()),
          " (packed 8-bit state); resume it at the world size it was saved at (",
          old_states.size(), " ranks)"));
    }
    std::vector<Tensor> shards;
    for (const OptimizerState& s : old_states) shards.push_back(s.tensors.at(name));
    CCTUNE_ASSIGN_OR_RETURN(Tensor mine, ReshardTensor(shards, it->second, rank, world_size));
    out.tensors[name] = std::move(mine);
  }
  return out;
}

}  // namespace cctune
