#include "distributed/fsdp.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/dtype.h"
#include "core/status.h"
#include "kernels/ops.h"

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

// Hands elements [begin, end) of `buf` back to the kernel (the whole pages inside; on the CPU
// only). With `zero` the range reads as zeros afterwards (the partial pages at its ends are
// cleared by hand; private anonymous pages come back zero-filled).
absl::Status DiscardRange(const Tensor& buf, int64_t begin, int64_t end, bool zero) {
  if (end <= begin) return absl::OkStatus();
  if (!buf.device().is_cpu()) {
    if (!zero) return absl::OkStatus();
    CCTUNE_ASSIGN_OR_RETURN(Tensor part, buf.Narrow(0, begin, end - begin));
    return ZeroTensor(part);
  }
  static const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const size_t esz = DTypeSize(buf.dtype());
  char* base = static_cast<char*>(buf.raw_data());
  const uintptr_t b = reinterpret_cast<uintptr_t>(base + begin * esz);
  const uintptr_t e = reinterpret_cast<uintptr_t>(base + end * esz);
  const uintptr_t first = (b + page - 1) / page * page, last = e / page * page;
  if (last <= first) {
    if (zero) std::memset(reinterpret_cast<void*>(b), 0, e - b);
    return absl::OkStatus();
  }
  if (zero) {
    std::memset(reinterpret_cast<void*>(b), 0, first - b);
    std::memset(reinterpret_cast<void*>(last), 0, e - last);
  }
  if (::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED) != 0 && zero) {
    std::memset(reinterpret_cast<void*>(first), 0, last - first);  // kept resident, but zero
  }
  return absl::OkStatus();
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

absl::StatusOr<std::unique_ptr<LayerShardedArena>> LayerShardedArena::Create(
    ProcessGroup* pg, const ParameterArena& params, const ParameterArena& grads, int num_layers,
    bool tied_output, bool reshard_after_forward) {
  if (grads.buffers().size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "per-layer sharding: the gradient arena has ", grads.buffers().size(),
        " buffers (one dtype is needed)"));
  }
  return Make(pg, params, &grads, num_layers, tied_output, reshard_after_forward, {});
}

absl::StatusOr<std::unique_ptr<LayerShardedArena>> LayerShardedArena::CreateFrozen(
    ProcessGroup* pg, const ParameterArena& params, int num_layers, bool tied_output,
    bool reshard_after_forward, std::vector<std::pair<int64_t, int64_t>> keep_resident) {
  std::sort(keep_resident.begin(), keep_resident.end());
  return Make(pg, params, nullptr, num_layers, tied_output, reshard_after_forward,
              std::move(keep_resident));
}

absl::StatusOr<std::unique_ptr<LayerShardedArena>> LayerShardedArena::Make(
    ProcessGroup* pg, const ParameterArena& params, const ParameterArena* grads, int num_layers,
    bool tied_output, bool reshard_after_forward,
    std::vector<std::pair<int64_t, int64_t>> keep_resident) {
  const int n = pg->world_size();
  if (params.buffers().size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "per-layer sharding: the arena has ", params.buffers().size(),
        " buffers (one dtype is needed)"));
  }
  const Tensor& p = params.buffers()[0];
  const bool frozen = grads == nullptr;
  const Tensor g = frozen ? Tensor() : grads->buffers()[0];
  if (!frozen && (p.numel() != g.numel() || g.dtype() != DType::kF32)) {
    return absl::InvalidArgumentError("per-layer sharding: the gradient arena does not match");
  }
  auto out = std::unique_ptr<LayerShardedArena>(new LayerShardedArena());
  out->pg_ = pg;
  out->params_ = p;
  out->grads_ = g;
  out->frozen_ = frozen;
  out->keep_ = std::move(keep_resident);
  out->num_layers_ = num_layers;
  out->tied_ = tied_output;
  out->reshard_after_forward_ = reshard_after_forward;
  const int num_units = num_layers + 2;
  std::vector<int64_t> begin(num_units, -1);
  int last = 0;
  for (const ParameterLayout::Entry& e : params.layout().entries()) {
    int u = num_layers + 1;
    const std::string& name = e.spec.name;
    if (absl::StartsWith(name, "tok_embeddings.")) {
      u = 0;
    } else if (absl::StartsWith(name, "layers.")) {
      const size_t dot = name.find('.', 7);
      int i = 0;
      if (dot != std::string::npos && absl::SimpleAtoi(name.substr(7, dot - 7), &i) && i >= 0 &&
          i < num_layers) {
        u = i + 1;
      }
    }
    if (u < last) {
      return absl::InvalidArgumentError(absl::StrCat(
          "per-layer sharding: parameter ", name, " is out of order (its layer's parameters are "
          "not contiguous in the arena)"));
    }
    last = u;
    if (begin[u] < 0) begin[u] = e.offset;
  }
  for (int u = 0; u < num_units; ++u) {
    if (begin[u] < 0) {
      return absl::InvalidArgumentError(absl::StrCat("per-layer sharding: unit ", u, " is empty"));
    }
  }
  begin[0] = 0;
  const int rank = pg->rank();
  for (int u = 0; u < num_units; ++u) {
    Unit x;
    x.begin = begin[u];
    x.end = u + 1 < num_units ? begin[u + 1] : p.numel();
    const int64_t len = x.end - x.begin;
    // Rank r owns [r * stride, r * stride + count_r) of the unit: ceil(len / N) elements, the
    // last ranks fewer when N does not divide len (the collectives' chunks are padded).
    x.stride = ShardNumel(len, n);
    x.even = x.stride * n == len;
    x.own = std::min(len, rank * x.stride);
    x.shard = std::min(len, x.own + x.stride) - x.own;
    CCTUNE_ASSIGN_OR_RETURN(x.shard_param, p.Narrow(0, x.begin + x.own, x.shard));
    CCTUNE_ASSIGN_OR_RETURN(x.staging, Tensor::Zeros({x.stride}, p.dtype(), p.device()));
    CCTUNE_ASSIGN_OR_RETURN(x.view, p.Narrow(0, x.begin, len));
    if (!frozen) {
      CCTUNE_ASSIGN_OR_RETURN(x.grad_view, g.Narrow(0, x.begin, len));
      CCTUNE_ASSIGN_OR_RETURN(x.shard_grad, Tensor::Zeros({x.shard}, DType::kF32, g.device()));
      CCTUNE_ASSIGN_OR_RETURN(x.reduced, Tensor::Empty({x.stride}, DType::kF32, g.device()));
    }
    out->units_.push_back(std::move(x));
  }
  // From here on a rank keeps its own shards; the rest comes back when a unit is used.
  if (!frozen) CCTUNE_RETURN_IF_ERROR(DiscardRange(g, 0, g.numel(), /*zero=*/true));
  CCTUNE_RETURN_IF_ERROR(out->ReleaseAll());
  return out;
}

std::vector<ParamBuffer> LayerShardedArena::OptimizerBuffers() const {
  std::vector<ParamBuffer> out;
  for (int u = 0; u < num_units(); ++u) {
    out.push_back({absl::StrCat("unit", u, "_", DTypeName(params_.dtype())), units_[u].shard_param,
                   units_[u].shard_grad});
  }
  return out;
}

std::map<std::string, ShardSpan> LayerShardedArena::ShardSpans() const {
  std::map<std::string, ShardSpan> out;
  for (int u = 0; u < num_units(); ++u) {
    out[absl::StrCat("unit", u, "_", DTypeName(params_.dtype()))] =
        ShardSpan{units_[u].stride, units_[u].shard};
  }
  return out;
}

int64_t LayerShardedArena::ShardGradientBytes() const {
  int64_t bytes = 0;
  for (const Unit& x : units_) bytes += static_cast<int64_t>(x.shard_grad.nbytes());
  return bytes;
}

int64_t LayerShardedArena::ResidentForeignElements() const {
  int64_t n = 0;
  for (const Unit& x : units_) {
    if (x.resident) n += (x.end - x.begin) - x.shard;  // (x.shard: this rank's count)
  }
  return n;
}

int LayerShardedArena::UnitOfStage(int stage) const {
  if (stage < 0) return 0;
  if (stage >= num_layers_) return num_layers_ + 1;
  return stage + 1;
}

absl::Status LayerShardedArena::Prefetch(int u) {
  if (u < 0 || u >= num_units()) return absl::OkStatus();
  Unit& x = units_[u];
  if (x.resident || x.gather != nullptr) return absl::OkStatus();
  if (x.even) {
    CCTUNE_RETURN_IF_ERROR(x.staging.CopyFrom(x.shard_param));
    CCTUNE_ASSIGN_OR_RETURN(x.gather, pg_->StartAllGather(x.staging, x.view));
    return absl::OkStatus();
  }
  // Uneven: the padded chunks gather into a buffer of N * stride, copied into the unit after.
  if (x.shard > 0) {
    CCTUNE_ASSIGN_OR_RETURN(Tensor head, x.staging.Narrow(0, 0, x.shard));
    CCTUNE_RETURN_IF_ERROR(head.CopyFrom(x.shard_param));
  }
  CCTUNE_ASSIGN_OR_RETURN(x.gathered,
                          Tensor::Empty({x.stride * pg_->world_size()}, params_.dtype(),
                                        params_.device()));
  CCTUNE_ASSIGN_OR_RETURN(x.gather, pg_->StartAllGather(x.staging, x.gathered));
  return absl::OkStatus();
}

// Waits for the unit's gather in flight; an uneven unit's gathered chunks go into the arena.
absl::Status LayerShardedArena::FinishGather(Unit& x) {
  const absl::Status s = x.gather->Wait();
  x.gather.reset();
  CCTUNE_RETURN_IF_ERROR(s);
  if (!x.even) {
    CCTUNE_ASSIGN_OR_RETURN(Tensor used, x.gathered.Narrow(0, 0, x.end - x.begin));
    CCTUNE_RETURN_IF_ERROR(x.view.CopyFrom(used));
    x.gathered = Tensor();
  }
  return absl::OkStatus();
}

absl::Status LayerShardedArena::Acquire(int u) {
  Unit& x = units_[u];
  if (x.resident) return absl::OkStatus();
  CCTUNE_RETURN_IF_ERROR(Prefetch(u));
  CCTUNE_RETURN_IF_ERROR(FinishGather(x));
  x.resident = true;
  return absl::OkStatus();
}

absl::Status LayerShardedArena::Release(int u) {
  Unit& x = units_[u];
  if (x.gather != nullptr) CCTUNE_RETURN_IF_ERROR(FinishGather(x));  // (its data unused)
  if (!x.resident || pg_->world_size() == 1) {
    x.resident = pg_->world_size() == 1;  // a world of one owns everything
    return absl::OkStatus();
  }
  const int64_t own = x.begin + x.own;
  CCTUNE_RETURN_IF_ERROR(DiscardForeign(x.begin, own));
  CCTUNE_RETURN_IF_ERROR(DiscardForeign(own + x.shard, x.end));
  x.resident = false;
  return absl::OkStatus();
}

// Hands back the pages of params_ [begin, end) but those of the ranges kept resident.
absl::Status LayerShardedArena::DiscardForeign(int64_t begin, int64_t end) {
  int64_t at = begin;
  for (const auto& [kb, ke] : keep_) {
    if (ke <= at) continue;
    if (kb >= end) break;
    CCTUNE_RETURN_IF_ERROR(DiscardRange(params_, at, std::min(kb, end), /*zero=*/false));
    at = std::max(at, ke);
  }
  return DiscardRange(params_, at, end, /*zero=*/false);
}

absl::Status LayerShardedArena::ReduceScatter(int u) {
  Unit& x = units_[u];
  if (x.reduce != nullptr) CCTUNE_RETURN_IF_ERROR(FinishReduceScatters(-1));  // (not expected)
  if (x.even) {
    CCTUNE_ASSIGN_OR_RETURN(x.reduce, pg_->StartReduceScatter(x.grad_view, x.reduced, ReduceOp::kSum));
  } else {
    // Uneven: the unit's gradients, zero padded to N * stride (kept until the reduce is done).
    const int64_t len = x.end - x.begin;
    CCTUNE_ASSIGN_OR_RETURN(x.rs_input, Tensor::Zeros({x.stride * pg_->world_size()}, DType::kF32,
                                                      grads_.device()));
    CCTUNE_ASSIGN_OR_RETURN(Tensor head, x.rs_input.Narrow(0, 0, len));
    CCTUNE_RETURN_IF_ERROR(head.CopyFrom(x.grad_view));
    CCTUNE_ASSIGN_OR_RETURN(x.reduce, pg_->StartReduceScatter(x.rs_input, x.reduced, ReduceOp::kSum));
  }
  pending_reduces_.push_back(u);
  return absl::OkStatus();
}

absl::Status LayerShardedArena::FinishReduceScatter(int u) {
  Unit& x = units_[u];
  if (x.reduce == nullptr) return absl::OkStatus();
  const absl::Status s = x.reduce->Wait();
  x.reduce.reset();
  CCTUNE_RETURN_IF_ERROR(s);
  x.rs_input = Tensor();
  if (x.shard > 0) {
    CCTUNE_ASSIGN_OR_RETURN(Tensor mine, x.reduced.Narrow(0, 0, x.shard));
    CCTUNE_RETURN_IF_ERROR(ops::Add(x.shard_grad, x.shard_grad, mine));
  }
  return DiscardRange(grads_, x.begin, x.end, /*zero=*/true);
}

absl::Status LayerShardedArena::FinishReduceScatters(int keep) {
  std::vector<int> still;
  for (int u : pending_reduces_) {
    if (u == keep) {
      still.push_back(u);
      continue;
    }
    CCTUNE_RETURN_IF_ERROR(FinishReduceScatter(u));
  }
  pending_reduces_ = std::move(still);
  return absl::OkStatus();
}

absl::Status LayerShardedArena::BeforeStage(int stage, bool backward) {
  const int last_unit = num_layers_ + 1;
  const int u = UnitOfStage(stage);
  if (!backward) {
    if (stage == num_layers_ + 1) {  // the output projection
      CCTUNE_RETURN_IF_ERROR(Acquire(last_unit));
      return tied_ ? Acquire(0) : absl::OkStatus();
    }
    if (reshard_after_forward_ && u > 0) CCTUNE_RETURN_IF_ERROR(Release(u - 1));
    CCTUNE_RETURN_IF_ERROR(Acquire(u));
    return Prefetch(u + 1);
  }
  if (stage < 0) return absl::OkStatus();  // the table's backward reads no weight
  CCTUNE_RETURN_IF_ERROR(Acquire(u));
  return u - 1 >= 1 ? Prefetch(u - 1) : absl::OkStatus();
}

absl::Status LayerShardedArena::GradientsReady(int stage) {
  if (stage == num_layers_ + 1) return absl::OkStatus();  // the head completes at the norm
  const int u = UnitOfStage(stage);
  if (frozen_) {  // no gradients of its own: the unit is done
    CCTUNE_RETURN_IF_ERROR(Release(u));
    return stage == num_layers_ && tied_ ? Release(0) : absl::OkStatus();
  }
  // Started: it overlaps the next layer's backward; the previous unit's is finished now (it
  // had this layer's backward to hide behind), the last one (the table's) at once.
  CCTUNE_RETURN_IF_ERROR(ReduceScatter(u));
  CCTUNE_RETURN_IF_ERROR(Release(u));
  if (stage == num_layers_ && tied_) CCTUNE_RETURN_IF_ERROR(Release(0));
  return FinishReduceScatters(u == 0 ? -1 : u);
}

absl::Status LayerShardedArena::FinishGradients() { return FinishReduceScatters(-1); }

absl::Status LayerShardedArena::GatherAll() {
  for (int u = 0; u < num_units(); ++u) CCTUNE_RETURN_IF_ERROR(Prefetch(u));
  for (int u = 0; u < num_units(); ++u) CCTUNE_RETURN_IF_ERROR(Acquire(u));
  return absl::OkStatus();
}

absl::Status LayerShardedArena::ReleaseAll() {
  CCTUNE_RETURN_IF_ERROR(FinishReduceScatters(-1));
  for (int u = 0; u < num_units(); ++u) CCTUNE_RETURN_IF_ERROR(Release(u));
  return absl::OkStatus();
}

absl::StatusOr<Tensor> ReshardTensor(const std::vector<Tensor>& old_shards, ShardSpan span,
                                     int rank, int world_size) {
  if (old_shards.empty()) return absl::InvalidArgumentError("reshard: no shards");
  std::vector<float> all;
  for (size_t r = 0; r < old_shards.size(); ++r) {
    const Tensor& t = old_shards[r];
    if (t.dtype() != DType::kF32) {
      return absl::InvalidArgumentError(absl::StrCat("reshard: shard ", r, " is ",
                                                     DTypeName(t.dtype()), " [", t.numel(),
                                                     "], not f32"));
    }
    CCTUNE_ASSIGN_OR_RETURN(std::vector<float> v, t.ToFloatVector());
    all.insert(all.end(), v.begin(), v.end());
  }
  // What no new shard covers must be padding.
  for (size_t i = static_cast<size_t>(span.stride) * world_size; i < all.size(); ++i) {
    if (all[i] != 0.0f) {
      return absl::InvalidArgumentError(absl::StrCat(
          "reshard: element ", i, " of the saved shards (", all[i], ") lies past the ",
          span.stride * world_size, " elements of ", world_size, " shards of ", span.stride));
    }
  }
  CCTUNE_ASSIGN_OR_RETURN(Tensor out, Tensor::Zeros({span.numel}, DType::kF32));
  float* o = out.data<float>();
  const int64_t begin = static_cast<int64_t>(rank) * span.stride;
  for (int64_t i = 0; i < span.numel && begin + i < static_cast<int64_t>(all.size()); ++i) {
    o[i] = all[static_cast<size_t>(begin + i)];
  }
  return out;
}

absl::StatusOr<Tensor> ReshardTensor(const std::vector<Tensor>& old_shards, int64_t shard_numel,
                                     int rank, int world_size) {
  return ReshardTensor(old_shards, ShardSpan{shard_numel, shard_numel}, rank, world_size);
}

absl::StatusOr<OptimizerState> ReshardOptimizerState(
    const std::vector<OptimizerState>& old_states,
    const std::map<std::string, int64_t>& shard_numel, int rank, int world_size) {
  std::map<std::string, ShardSpan> spans;
  for (const auto& [name, c] : shard_numel) spans[name] = ShardSpan{c, c};
  return ReshardOptimizerState(old_states, spans, rank, world_size);
}

absl::StatusOr<OptimizerState> ReshardOptimizerState(
    const std::vector<OptimizerState>& old_states,
    const std::map<std::string, ShardSpan>& shard_numel, int rank, int world_size) {
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
