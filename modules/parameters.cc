#include "modules/parameters.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status.h"
#include "core/storage.h"

namespace cctune {

namespace {

int64_t AlignUp(int64_t n, int64_t multiple) { return (n + multiple - 1) / multiple * multiple; }

// "first, second, ... (and N more)" for error messages.
std::string ListSome(const std::vector<std::string>& items, size_t max_items = 16) {
  std::vector<std::string> shown(items.begin(), items.begin() + std::min(items.size(), max_items));
  std::string s = absl::StrJoin(shown, ", ");
  if (items.size() > max_items) absl::StrAppend(&s, ", ... (", items.size() - max_items, " more)");
  return s;
}

// dst <- src. From a mapped file (contiguous), in row blocks of about kReleaseChunkBytes of
// the source, releasing each block's pages once copied: a converting load holds one copy of
// the weights plus one block, even for an embedding table of hundreds of MB.
constexpr size_t kReleaseChunkBytes = size_t{8} << 20;

absl::Status CopyReleasingPages(Tensor& dst, const Tensor& src) {
  const bool mapped = src.storage() != nullptr && src.storage()->file_mapped() &&
                      src.is_contiguous() && src.dim() >= 1 && src.size(0) > 0;
  if (!mapped) return dst.CopyFrom(src);
  const size_t esz = DTypeSize(src.dtype());
  const size_t row_bytes = std::max<size_t>(1, src.nbytes() / static_cast<size_t>(src.size(0)));
  const int64_t rows = std::max<int64_t>(1, static_cast<int64_t>(kReleaseChunkBytes / row_bytes));
  for (int64_t r = 0; r < src.size(0); r += rows) {
    const int64_t n = std::min(rows, src.size(0) - r);
    CCTUNE_ASSIGN_OR_RETURN(Tensor s, src.Narrow(0, r, n));
    CCTUNE_ASSIGN_OR_RETURN(Tensor d, dst.Narrow(0, r, n));
    CCTUNE_RETURN_IF_ERROR(d.CopyFrom(s));
    src.storage()->ReleasePages(static_cast<size_t>(s.offset()) * esz, s.nbytes());
  }
  return absl::OkStatus();
}

}  // namespace

// ---- ParameterLayout ----

absl::StatusOr<ParameterLayout> ParameterLayout::Create(std::vector<ParameterSpec> specs) {
  ParameterLayout layout;
  layout.entries_.reserve(specs.size());
  for (ParameterSpec& spec : specs) {
    if (spec.name.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("ParameterLayout: a parameter of shape ",
                                                     ShapeToString(spec.shape),
                                                     " has an empty name"));
    }
    for (int64_t s : spec.shape) {
      if (s < 0) {
        return absl::InvalidArgumentError(absl::StrCat("ParameterLayout: parameter '", spec.name,
                                                       "' has negative shape ",
                                                       ShapeToString(spec.shape)));
      }
    }
    if (layout.index_.count(spec.name) > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("ParameterLayout: parameter '", spec.name, "' is declared twice"));
    }
    int buffer = -1;
    for (size_t b = 0; b < layout.buffers_.size(); ++b) {
      if (layout.buffers_[b].dtype == spec.dtype) buffer = static_cast<int>(b);
    }
    if (buffer < 0) {
      buffer = static_cast<int>(layout.buffers_.size());
      layout.buffers_.push_back({spec.dtype, 0});
    }
    Buffer& buf = layout.buffers_[buffer];
    const int64_t align_elems = kParameterAlignmentElements;
    static_assert(kParameterAlignmentElements * 2 == kParameterAlignmentBytes,
                  "16-bit parameters start on kParameterAlignmentBytes boundaries");
    Entry e;
    e.buffer = buffer;
    e.offset = AlignUp(buf.numel, align_elems);
    e.numel = NumElements(spec.shape);
    buf.numel = e.offset + e.numel;
    e.spec = std::move(spec);
    layout.index_[e.spec.name] = static_cast<int>(layout.entries_.size());
    layout.entries_.push_back(std::move(e));
  }
  return layout;
}

absl::StatusOr<ParameterLayout> ParameterLayout::FromModule(const Module& module,
                                                            DType default_dtype) {
  std::vector<ParameterSpec> specs;
  module.ForEachParameter(
      Module::ConstParameterFn([&](const std::string& name, const Parameter& p) {
        specs.push_back({name, p.shape, p.dtype.value_or(default_dtype), p.init});
      }));
  return Create(std::move(specs));
}

const ParameterLayout::Entry* ParameterLayout::Find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

int64_t ParameterLayout::NumParameters() const {
  int64_t n = 0;
  for (const Entry& e : entries_) n += e.numel;
  return n;
}

size_t ParameterLayout::Bytes() const {
  size_t bytes = 0;
  for (const Buffer& b : buffers_) bytes += static_cast<size_t>(b.numel) * DTypeSize(b.dtype);
  return bytes;
}

ParameterLayout ParameterLayout::WithDType(DType dtype) const {
  std::vector<ParameterSpec> specs;
  specs.reserve(entries_.size());
  for (const Entry& e : entries_) {
    ParameterSpec s = e.spec;
    s.dtype = dtype;
    specs.push_back(std::move(s));
  }
  // Cannot fail: the names and shapes were valid already.
  return ValueOrDie(Create(std::move(specs)));
}

ParameterLayout ParameterLayout::PadBuffersTo(int64_t multiple) const {
  ParameterLayout padded = *this;
  if (multiple <= 1) return padded;
  for (Buffer& b : padded.buffers_) b.numel = (b.numel + multiple - 1) / multiple * multiple;
  return padded;
}

// ---- ParameterArena ----

absl::StatusOr<ParameterArena> ParameterArena::Materialize(ParameterLayout layout,
                                                           const Device& device) {
  ParameterArena arena;
  arena.device_ = device;
  for (const ParameterLayout::Buffer& b : layout.buffers()) {
    CCTUNE_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty({b.numel}, b.dtype, device));
    // Before the first write: a decode step streams every weight, and on 4 KiB pages the TLB
    // misses cost ~12% of its speed (docs/generation.md, "Memory and load time").
    if (t.storage() != nullptr) t.storage()->AdviseHugePages();
    arena.buffers_.push_back(std::move(t));
  }
  arena.tensors_.reserve(layout.entries().size());
  for (const ParameterLayout::Entry& e : layout.entries()) {
    Tensor view;
    if (device.is_meta()) {
      CCTUNE_ASSIGN_OR_RETURN(view, Tensor::Empty(e.spec.shape, e.spec.dtype, device));
    } else {
      const Tensor& buf = arena.buffers_[e.buffer];
      CCTUNE_ASSIGN_OR_RETURN(view, Tensor::FromStorage(buf.storage(), e.spec.shape, e.spec.dtype,
                                                        buf.offset() + e.offset));
    }
    arena.tensors_.emplace_back(e.spec.name, std::move(view));
  }
  arena.layout_ = std::move(layout);
  CCTUNE_RETURN_IF_ERROR(arena.ZeroPadding());
  return arena;
}

absl::StatusOr<ParameterArena> ParameterArena::Allocate(ParameterLayout layout,
                                                        const Device& device) {
  CCTUNE_ASSIGN_OR_RETURN(ParameterArena arena, Materialize(std::move(layout), device));
  CCTUNE_RETURN_IF_ERROR(arena.Zero());
  return arena;
}

absl::StatusOr<ParameterArena> ParameterArena::Create(Module& module, DType default_dtype,
                                                      const Device& device) {
  CCTUNE_ASSIGN_OR_RETURN(ParameterLayout layout,
                          ParameterLayout::FromModule(module, default_dtype));
  CCTUNE_ASSIGN_OR_RETURN(ParameterArena arena, Materialize(std::move(layout), device));
  CCTUNE_RETURN_IF_ERROR(arena.Bind(module));
  return arena;
}

absl::StatusOr<ParameterArena> ParameterArena::CreateViewing(Module& module,
                                                             const StateDict& state_dict,
                                                             DType default_dtype,
                                                             const Device& device,
                                                             bool view_mapped_files) {
  CCTUNE_ASSIGN_OR_RETURN(ParameterLayout layout,
                          ParameterLayout::FromModule(module, default_dtype));
  // Which parameters can be their state-dict tensor; the rest get owned buffers.
  std::vector<const Tensor*> viewed(layout.entries().size(), nullptr);
  std::vector<ParameterSpec> copied;
  for (size_t i = 0; i < layout.entries().size(); ++i) {
    const ParameterSpec& spec = layout.entries()[i].spec;
    auto it = state_dict.find(spec.name);
    const Tensor* src = it == state_dict.end() ? nullptr : &it->second;
    if (src != nullptr && src->defined() && !device.is_meta() && src->device() == device &&
        src->dtype() == spec.dtype && src->shape() == spec.shape && src->is_contiguous() &&
        (view_mapped_files || src->storage() == nullptr || !src->storage()->file_mapped())) {
      viewed[i] = src;
    } else {
      copied.push_back(spec);
    }
  }
  CCTUNE_ASSIGN_OR_RETURN(ParameterLayout owned_layout, ParameterLayout::Create(std::move(copied)));
  CCTUNE_ASSIGN_OR_RETURN(ParameterArena owned, Materialize(std::move(owned_layout), device));
  ParameterArena arena;
  arena.device_ = device;
  arena.buffers_ = std::move(owned.buffers_);
  arena.tensors_.reserve(layout.entries().size());
  for (size_t i = 0; i < layout.entries().size(); ++i) {
    const std::string& name = layout.entries()[i].spec.name;
    if (viewed[i] != nullptr) {
      arena.tensors_.emplace_back(name, *viewed[i]);
      arena.viewed_bytes_ += viewed[i]->nbytes();
    } else {
      CCTUNE_ASSIGN_OR_RETURN(Tensor t, owned.Get(name));
      arena.tensors_.emplace_back(name, std::move(t));
    }
  }
  arena.layout_ = std::move(layout);
  CCTUNE_RETURN_IF_ERROR(arena.LoadStateDict(state_dict, /*strict=*/true).status());
  // Map the viewed pages now (~0.1 s for 2.2 GB from the page cache) rather than fault them in
  // 64 KiB at a time during the first forward pass, where they cost prefill 0.2-0.4 s.
  for (const Tensor* v : viewed) {
    if (v == nullptr || v->storage() == nullptr) continue;
    v->storage()->PopulatePages(static_cast<size_t>(v->offset()) * DTypeSize(v->dtype()),
                                v->nbytes());
  }
  CCTUNE_RETURN_IF_ERROR(arena.Bind(module));
  return arena;
}

absl::Status ParameterArena::RefuseIfViewing(const char* what) const {
  if (viewed_bytes_ == 0) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "ParameterArena::", what, ": the arena views ", viewed_bytes_,
      " bytes of checkpoint memory (CreateViewing); an arena to write into comes from Create"));
}

absl::Status ParameterArena::Bind(Module& module) const {
  // Check everything first so that a failed Bind leaves the module untouched.
  std::vector<std::pair<std::string, Parameter*>> params;
  module.ForEachParameter(Module::ParameterFn(
      [&](const std::string& name, Parameter& p) { params.emplace_back(name, &p); }));
  if (params.size() != tensors_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("ParameterArena::Bind: the module has ",
                                                   params.size(), " parameters, the arena ",
                                                   tensors_.size()));
  }
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& [name, p] = params[i];
    const ParameterLayout::Entry& e = layout_.entries()[i];
    if (name != e.spec.name || p->shape != e.spec.shape ||
        (p->dtype.has_value() && *p->dtype != e.spec.dtype)) {
      return absl::InvalidArgumentError(
          absl::StrCat("ParameterArena::Bind: module parameter ", i, " '", name, "' ",
                       ShapeToString(p->shape), " does not match arena entry '", e.spec.name, "' ",
                       ShapeToString(e.spec.shape), " ", DTypeName(e.spec.dtype)));
    }
  }
  for (size_t i = 0; i < params.size(); ++i) params[i].second->value = tensors_[i].second;
  return absl::OkStatus();
}

absl::StatusOr<Tensor> ParameterArena::Get(const std::string& name) const {
  const ParameterLayout::Entry* e = layout_.Find(name);
  if (e == nullptr) {
    return absl::NotFoundError(absl::StrCat("ParameterArena: no parameter named '", name, "'"));
  }
  return tensors_[e - layout_.entries().data()].second;
}

absl::Status ParameterArena::ZeroPadding() {
  if (device_.is_meta()) return absl::OkStatus();
  if (!device_.is_cpu()) return Zero();  // rare; one pass over the device buffers
  // Entries are laid out in order within each buffer, so the gaps are between neighbours.
  std::vector<int64_t> end(buffers_.size(), 0);
  auto clear = [&](int buffer, int64_t from, int64_t to) {
    if (to <= from) return;
    const size_t esz = DTypeSize(buffers_[buffer].dtype());
    std::memset(static_cast<char*>(buffers_[buffer].raw_data()) + from * esz, 0, (to - from) * esz);
  };
  for (const ParameterLayout::Entry& e : layout_.entries()) {
    clear(e.buffer, end[e.buffer], e.offset);
    end[e.buffer] = e.offset + e.numel;
  }
  for (size_t b = 0; b < buffers_.size(); ++b) {
    clear(static_cast<int>(b), end[b], buffers_[b].numel());
  }
  return absl::OkStatus();
}

absl::Status ParameterArena::Zero() {
  CCTUNE_RETURN_IF_ERROR(RefuseIfViewing("Zero"));
  for (Tensor& b : buffers_) {
    if (b.device().is_meta() || b.numel() == 0) continue;
    if (b.device().is_cpu()) {
      std::memset(b.raw_data(), 0, b.nbytes());
    } else {
      CCTUNE_ASSIGN_OR_RETURN(Tensor zeros, Tensor::Zeros(b.shape(), b.dtype()));
      CCTUNE_RETURN_IF_ERROR(b.CopyFrom(zeros));
    }
  }
  return absl::OkStatus();
}

absl::Status ParameterArena::InitializeRandom(Generator& gen) {
  CCTUNE_RETURN_IF_ERROR(RefuseIfViewing("InitializeRandom"));
  if (device_.is_meta()) return absl::OkStatus();
  for (size_t i = 0; i < tensors_.size(); ++i) {
    Tensor& t = tensors_[i].second;
    const ParameterInit& init = layout_.entries()[i].spec.init;
    switch (init.kind) {
      case ParameterInit::Kind::kNormal:
        CCTUNE_RETURN_IF_ERROR(FillNormal(t, 0.0, init.scale, gen));
        break;
      case ParameterInit::Kind::kUniform:
        CCTUNE_RETURN_IF_ERROR(FillUniform(t, -init.scale, init.scale, gen));
        break;
      case ParameterInit::Kind::kOnes:
      case ParameterInit::Kind::kZeros: {
        const double v = init.kind == ParameterInit::Kind::kOnes ? 1.0 : 0.0;
        CCTUNE_ASSIGN_OR_RETURN(Tensor fill, Tensor::Full(t.shape(), v, t.dtype()));
        CCTUNE_RETURN_IF_ERROR(t.CopyFrom(fill));
        break;
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ParameterArena::CheckStateDict(const StateDict& state_dict, bool strict,
                                            LoadReport& report) const {
  std::vector<std::string> missing_msg, unexpected_msg, mismatched;
  for (const ParameterLayout::Entry& e : layout_.entries()) {
    auto it = state_dict.find(e.spec.name);
    if (it == state_dict.end()) {
      report.missing.push_back(e.spec.name);
      missing_msg.push_back(absl::StrCat(e.spec.name, " ", ShapeToString(e.spec.shape)));
      continue;
    }
    const Tensor& src = it->second;
    if (!src.defined() || src.device().is_meta()) {
      if (device_.is_meta()) {  // a meta model only checks names and shapes
        if (src.shape() != e.spec.shape) {
          mismatched.push_back(absl::StrCat(e.spec.name, ": checkpoint ",
                                            ShapeToString(src.shape()), " vs model ",
                                            ShapeToString(e.spec.shape)));
        }
        continue;
      }
      mismatched.push_back(absl::StrCat(e.spec.name, ": the checkpoint tensor holds no data (",
                                        src.defined() ? "meta" : "undefined", ")"));
      continue;
    }
    if (src.shape() != e.spec.shape) {
      mismatched.push_back(absl::StrCat(e.spec.name, ": checkpoint ", ShapeToString(src.shape()),
                                        " vs model ", ShapeToString(e.spec.shape)));
      continue;
    }
    if (!IsFloating(src.dtype()) && IsFloating(e.spec.dtype)) {
      mismatched.push_back(absl::StrCat(e.spec.name, ": checkpoint dtype ", DTypeName(src.dtype()),
                                        " cannot load into ", DTypeName(e.spec.dtype)));
    }
  }
  for (const auto& [name, t] : state_dict) {
    if (layout_.Find(name) == nullptr) {
      report.unexpected.push_back(name);
      unexpected_msg.push_back(absl::StrCat(name, " ", ShapeToString(t.shape())));
    }
  }
  const bool names_bad = !report.missing.empty() || !report.unexpected.empty();
  if (!mismatched.empty() || (strict && names_bad)) {
    std::string msg = "LoadStateDict:";
    if (!report.missing.empty()) {
      absl::StrAppend(&msg, " ", report.missing.size(), " missing [", ListSome(missing_msg), "];");
    }
    if (!report.unexpected.empty()) {
      absl::StrAppend(&msg, " ", report.unexpected.size(), " unexpected [",
                      ListSome(unexpected_msg), "];");
    }
    if (!mismatched.empty()) {
      absl::StrAppend(&msg, " ", mismatched.size(), " shape/dtype mismatches [",
                      ListSome(mismatched), "];");
    }
    msg.pop_back();
    return absl::InvalidArgumentError(msg);
  }
  return absl::OkStatus();
}

absl::StatusOr<ParameterArena::LoadReport> ParameterArena::LoadStateDict(
    const StateDict& state_dict, bool strict) {
  LoadReport report;
  CCTUNE_RETURN_IF_ERROR(CheckStateDict(state_dict, strict, report));
  // The copies, one tensor per task: on the CPU they run on all OpenMP threads (a bf16 -> f32
  // load of 1.1 B parameters converted on one thread took ~1.2 s per GB of output), each
  // releasing its source's pages as it goes, so the peak stays one copy of the weights plus a
  // block per thread.
  std::vector<std::pair<Tensor*, const Tensor*>> copies;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    auto it = state_dict.find(tensors_[i].first);
    if (it == state_dict.end()) continue;
    Tensor& dst = tensors_[i].second;
    const Tensor& src = it->second;
    const bool is_src = dst.SharesStorageWith(src) && dst.offset() == src.offset() &&
                        dst.dtype() == src.dtype() && dst.is_contiguous() && src.is_contiguous();
    copies.emplace_back(device_.is_meta() || is_src ? nullptr : &dst, &src);
    report.loaded.push_back(tensors_[i].first);
  }
  std::vector<absl::Status> status(copies.size());
  const int64_t n = static_cast<int64_t>(copies.size());
#pragma omp parallel for schedule(dynamic, 1) if (device_.is_cpu() && n > 1)
  for (int64_t c = 0; c < n; ++c) {
    if (copies[c].first != nullptr) status[c] = CopyReleasingPages(*copies[c].first, *copies[c].second);
  }
  for (size_t c = 0; c < status.size(); ++c) {
    if (!status[c].ok()) {
      return absl::Status(status[c].code(), absl::StrCat("LoadStateDict: copying '",
                                                         report.loaded[c], "': ",
                                                         status[c].message()));
    }
  }
  return report;
}

StateDict ParameterArena::ExportStateDict() const {
  StateDict sd;
  for (const auto& [name, t] : tensors_) sd.emplace(name, t);
  return sd;
}

}  // namespace cctune
