#include "checkpoint/safetensors.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <functional>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "checkpoint/atomic_file.h"
#include "checkpoint/dtype_convert.h"
#include "checkpoint/mapped_file.h"
#include "core/status.h"
#include "nlohmann/json.hpp"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors data is little-endian; big-endian hosts need byte swapping");

namespace cctune {
namespace {

using Json = nlohmann::json;

constexpr const char* kMetadataKey = "__metadata__";

std::string Prefix(absl::string_view file) { return absl::StrCat("safetensors '", file, "': "); }

absl::Status Bad(absl::string_view file, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(Prefix(file), what));
}

absl::Status BadTensor(absl::string_view file, absl::string_view name, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(Prefix(file), "tensor '", name, "': ", what));
}

// A JSON value's type, for messages.
std::string JsonKind(const Json& j) { return j.type_name(); }

// Reads a non-negative JSON integer.
bool GetUint(const Json& j, uint64_t* out) {
  if (j.is_number_unsigned()) {
    *out = j.get<uint64_t>();
    return true;
  }
  if (j.is_number_integer()) {
    const int64_t v = j.get<int64_t>();
    if (v < 0) return false;
    *out = static_cast<uint64_t>(v);
    return true;
  }
  return false;
}

absl::StatusOr<SafetensorsEntry> ParseEntry(absl::string_view file, const std::string& name,
                                            const Json& v, uint64_t data_size) {
  if (!v.is_object()) {
    return BadTensor(file, name, absl::StrCat("entry is a JSON ", JsonKind(v), ", not an object"));
  }
  SafetensorsEntry e;
  // dtype
  auto dt = v.find("dtype");
  if (dt == v.end()) return BadTensor(file, name, "missing field \"dtype\"");
  if (!dt->is_string()) {
    return BadTensor(file, name, absl::StrCat("\"dtype\" is a JSON ", JsonKind(*dt), ", not a string"));
  }
  const std::string& dtype_name = dt->get_ref<const std::string&>();
  auto dtype = SafetensorsDTypeFromName(dtype_name);
  if (!dtype.ok()) {
    return absl::Status(dtype.status().code(),
                        absl::StrCat(Prefix(file), "tensor '", name, "': ", dtype.status().message()));
  }
  e.dtype = *dtype;
  // shape
  auto sh = v.find("shape");
  if (sh == v.end()) return BadTensor(file, name, "missing field \"shape\"");
  if (!sh->is_array()) {
    return BadTensor(file, name, absl::StrCat("\"shape\" is a JSON ", JsonKind(*sh), ", not an array"));
  }
  if (sh->size() > static_cast<size_t>(kMaxDims)) {
    return BadTensor(file, name, absl::StrCat("shape has ", sh->size(), " dims; at most ",
                                              kMaxDims, " are supported"));
  }
  uint64_t numel = 1;
  bool overflow = false;
  for (const Json& d : *sh) {
    uint64_t s;
    if (!GetUint(d, &s)) {
      return BadTensor(file, name, absl::StrCat("shape entry ", d.dump(), " is not a non-negative integer"));
    }
    if (s > static_cast<uint64_t>(INT64_MAX)) overflow = true;
    if (__builtin_mul_overflow(numel, s, &numel)) overflow = true;
    e.shape.push_back(static_cast<int64_t>(s));
  }
  uint64_t bytes = 0;
  if (overflow || __builtin_mul_overflow(numel, static_cast<uint64_t>(DTypeSize(e.dtype)), &bytes) ||
      bytes > static_cast<uint64_t>(INT64_MAX)) {
    return BadTensor(file, name, absl::StrCat("shape ", sh->dump(), " is too large"));
  }
  // data_offsets
  auto off = v.find("data_offsets");
  if (off == v.end()) return BadTensor(file, name, "missing field \"data_offsets\"");
  if (!off->is_array() || off->size() != 2) {
    return BadTensor(file, name, absl::StrCat("\"data_offsets\" must be [begin, end], got ", off->dump()));
  }
  if (!GetUint((*off)[0], &e.begin) || !GetUint((*off)[1], &e.end)) {
    return BadTensor(file, name, absl::StrCat("\"data_offsets\" ", off->dump(),
                                              " must hold non-negative integers"));
  }
  if (e.begin > e.end) {
    return BadTensor(file, name, absl::StrCat("data_offsets [", e.begin, ", ", e.end,
                                              "]: begin is past end"));
  }
  if (e.end > data_size) {
    return BadTensor(file, name, absl::StrCat("data_offsets [", e.begin, ", ", e.end,
                                              "] run past the data section (", data_size,
                                              " bytes)"));
  }
  if (e.end - e.begin != bytes) {
    return BadTensor(file, name, absl::StrCat("data_offsets [", e.begin, ", ", e.end, "] span ",
                                              e.end - e.begin, " bytes but shape ",
                                              ShapeToString(e.shape), " of ", dtype_name,
                                              " needs ", bytes));
  }
  return e;
}

absl::StatusOr<SafetensorsHeader> ParseHeaderImpl(absl::string_view json, uint64_t data_size,
                                                  absl::string_view file) {
  // Duplicate top-level names would silently shadow each other; reject them.
  std::set<std::string> seen;
  std::string duplicate;
  Json::parser_callback_t cb = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (depth == 1 && event == Json::parse_event_t::key && parsed.is_string()) {
      const std::string& key = parsed.get_ref<const std::string&>();
      if (!seen.insert(key).second && duplicate.empty()) duplicate = key;
    }
    return true;
  };
  Json root;
  try {
    root = Json::parse(json.begin(), json.end(), cb, /*allow_exceptions=*/true);
  } catch (const Json::exception& e) {
    return Bad(file, absl::StrCat("header is not valid JSON: ", e.what()));
  }
  if (!duplicate.empty()) return Bad(file, absl::StrCat("header names '", duplicate, "' twice"));
  if (!root.is_object()) {
    return Bad(file, absl::StrCat("header is a JSON ", JsonKind(root), ", not an object"));
  }
  SafetensorsHeader h;
  h.data_size = data_size;
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string& name = it.key();
    const Json& v = it.value();
    if (name == kMetadataKey) {
      if (v.is_null()) continue;
      if (!v.is_object()) {
        return Bad(file, absl::StrCat("\"__metadata__\" is a JSON ", JsonKind(v), ", not an object"));
      }
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) {
          return Bad(file, absl::StrCat("\"__metadata__\" value of '", m.key(), "' is a JSON ",
                                        JsonKind(m.value()), ", not a string"));
        }
        h.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    CCTUNE_ASSIGN_OR_RETURN(SafetensorsEntry e, ParseEntry(file, name, v, data_size));
    h.tensors.emplace(name, std::move(e));
  }
  // No two tensors may share bytes.
  std::vector<std::pair<const std::string*, const SafetensorsEntry*>> order;
  order.reserve(h.tensors.size());
  for (const auto& [name, e] : h.tensors) order.emplace_back(&name, &e);
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return std::make_pair(a.second->begin, a.second->end) <
           std::make_pair(b.second->begin, b.second->end);
  });
  for (size_t i = 1; i < order.size(); ++i) {
    const SafetensorsEntry& prev = *order[i - 1].second;
    const SafetensorsEntry& cur = *order[i].second;
    if (cur.begin < prev.end) {
      return Bad(file, absl::StrCat("tensors '", *order[i - 1].first, "' [", prev.begin, ", ",
                                    prev.end, ") and '", *order[i].first, "' [", cur.begin, ", ",
                                    cur.end, ") overlap"));
    }
  }
  return h;
}

// Name order used for the data section: larger dtypes first so every offset is aligned.
std::vector<std::pair<std::string, Tensor>> DataOrder(const StateDict& tensors) {
  std::vector<std::pair<std::string, Tensor>> order(tensors.begin(), tensors.end());
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return DTypeSize(a.second.dtype()) > DTypeSize(b.second.dtype());
  });
  return order;
}

// Writes header then data through `sink`.
absl::Status WriteSafetensors(const StateDict& tensors,
                              const std::map<std::string, std::string>& metadata,
                              const std::function<absl::Status(const void*, size_t)>& sink) {
  uint64_t data_size = 0;
  CCTUNE_ASSIGN_OR_RETURN(std::string header, SafetensorsHeaderFor(tensors, metadata, &data_size));
  uint8_t len[8];
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(n >> (8 * i));
  CCTUNE_RETURN_IF_ERROR(sink(len, 8));
  CCTUNE_RETURN_IF_ERROR(sink(header.data(), header.size()));
  for (const auto& [name, t] : DataOrder(tensors)) {
    if (t.numel() == 0) continue;
    Tensor host = t;
    if (!host.device().is_cpu()) {
      CCTUNE_ASSIGN_OR_RETURN(host, host.To(Device::Cpu()));
    }
    CCTUNE_ASSIGN_OR_RETURN(host, host.Contiguous());
    CCTUNE_RETURN_IF_ERROR(sink(host.raw_data(), host.nbytes()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<DType> SafetensorsDTypeFromName(absl::string_view name) {
  if (name == "F32") return DType::kF32;
  if (name == "BF16") return DType::kBF16;
  if (name == "F16") return DType::kF16;
  if (name == "I64") return DType::kI64;
  if (name == "I32") return DType::kI32;
  if (name == "BOOL") return DType::kBool;
  static const char* const kKnownUnsupported[] = {
      "F64", "U8", "I8", "I16", "U16", "U32", "U64", "F8_E4M3", "F8_E5M2", "F8_E8M0",
      "E8M0", "F6_E2M3", "F6_E3M2", "F4", "C64", "C128"};
  for (const char* known : kKnownUnsupported) {
    if (name == known) {
      return absl::UnimplementedError(absl::StrCat(
          "dtype ", name, " is not supported (supported: F32, BF16, F16, I64, I32, BOOL)"));
    }
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown dtype \"", name, "\""));
}

const char* SafetensorsDTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "F32";
    case DType::kBF16:
      return "BF16";
    case DType::kF16:
      return "F16";
    case DType::kI64:
      return "I64";
    case DType::kI32:
      return "I32";
    case DType::kBool:
      return "BOOL";
  }
  return "?";
}

absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(absl::string_view json,
                                                         uint64_t data_size,
                                                         absl::string_view file) {
  // nlohmann reports errors by exception; none may leave this function.
  try {
    return ParseHeaderImpl(json, data_size, file);
  } catch (const std::exception& e) {
    return Bad(file, absl::StrCat("malformed header: ", e.what()));
  }
}

absl::StatusOr<SafetensorsHeader> ParseSafetensors(absl::string_view file_bytes,
                                                   absl::string_view file) {
  const uint64_t size = file_bytes.size();
  if (size < 8) {
    return Bad(file, absl::StrCat("file is ", size,
                                  " bytes, too short for the 8-byte header length"));
  }
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) {
    n |= static_cast<uint64_t>(static_cast<uint8_t>(file_bytes[i])) << (8 * i);
  }
  if (n > size - 8) {
    return Bad(file, absl::StrCat("header length ", n, " runs past the end of the file (",
                                  size - 8, " bytes follow the length)"));
  }
  if (n > kSafetensorsMaxHeaderBytes) {
    return Bad(file, absl::StrCat("header length ", n, " exceeds the limit of ",
                                  kSafetensorsMaxHeaderBytes, " bytes"));
  }
  CCTUNE_ASSIGN_OR_RETURN(SafetensorsHeader h,
                          ParseSafetensorsHeader(file_bytes.substr(8, n), size - 8 - n, file));
  h.data_start = 8 + n;
  return h;
}

absl::StatusOr<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  auto mapping = MapFile(path);
  if (!mapping.ok()) {
    return absl::Status(mapping.status().code(),
                        absl::StrCat(Prefix(path), mapping.status().message()));
  }
  SafetensorsFile f;
  f.path_ = path;
  f.mapping_ = std::move(mapping).value();
  CCTUNE_ASSIGN_OR_RETURN(
      f.header_,
      ParseSafetensors(absl::string_view(static_cast<const char*>(f.mapping_->data()),
                                         f.mapping_->bytes()),
                       path));
  return f;
}

std::vector<std::string> SafetensorsFile::Names() const {
  std::vector<std::string> names;
  names.reserve(header_.tensors.size());
  for (const auto& [name, e] : header_.tensors) names.push_back(name);
  return names;
}

absl::StatusOr<SafetensorsEntry> SafetensorsFile::Entry(const std::string& name) const {
  auto it = header_.tensors.find(name);
  if (it == header_.tensors.end()) {
    return absl::NotFoundError(absl::StrCat(Prefix(path_), "no tensor '", name, "' (the file has ",
                                            header_.tensors.size(), " tensors)"));
  }
  return it->second;
}

absl::StatusOr<Tensor> SafetensorsFile::Load(const std::string& name) const {
  CCTUNE_ASSIGN_OR_RETURN(SafetensorsEntry e, Entry(name));
  const uint64_t offset = header_.data_start + e.begin;
  const size_t elem = DTypeSize(e.dtype);
  if (offset % elem == 0) {
    return Tensor::FromStorage(mapping_, e.shape, e.dtype, static_cast<int64_t>(offset / elem));
  }
  // Misaligned for its dtype: hand out an aligned copy instead of a view.
  CCTUNE_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty(e.shape, e.dtype));
  if (e.end > e.begin) {
    std::memcpy(t.raw_data(), static_cast<const char*>(mapping_->data()) + offset,
                e.end - e.begin);
  }
  return t;
}

absl::StatusOr<Tensor> SafetensorsFile::Load(const std::string& name, DType target) const {
  CCTUNE_ASSIGN_OR_RETURN(Tensor src, Load(name));  // aligned view or aligned copy
  if (src.dtype() == target) return src;
  CCTUNE_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty(src.shape(), target));
  ConvertElements(t.raw_data(), target, src.raw_data(), src.dtype(), src.numel());
  return t;
}

absl::Status SafetensorsFile::LoadInto(const std::string& name, Tensor& dst) const {
  CCTUNE_ASSIGN_OR_RETURN(Tensor src, Load(name));
  if (!dst.defined() || dst.device().is_meta()) {
    return absl::InvalidArgumentError(absl::StrCat(Prefix(path_), "LoadInto('", name,
                                                   "'): the destination has no memory"));
  }
  if (dst.shape() != src.shape()) {
    return absl::InvalidArgumentError(absl::StrCat(
        Prefix(path_), "LoadInto('", name, "'): the file has shape ", ShapeToString(src.shape()),
        " but the destination is ", ShapeToString(dst.shape())));
  }
  if (dst.device().is_cpu() && dst.is_contiguous()) {
    ConvertElements(dst.raw_data(), dst.dtype(), src.raw_data(), src.dtype(), src.numel());
    return absl::OkStatus();
  }
  return dst.CopyFrom(src);
}

absl::StatusOr<StateDict> SafetensorsFile::LoadAll() const {
  StateDict sd;
  for (const auto& [name, e] : header_.tensors) {
    CCTUNE_ASSIGN_OR_RETURN(sd[name], Load(name));
  }
  return sd;
}

absl::StatusOr<StateDict> SafetensorsFile::LoadAll(DType target) const {
  StateDict sd;
  for (const auto& [name, e] : header_.tensors) {
    CCTUNE_ASSIGN_OR_RETURN(sd[name], Load(name, target));
  }
  return sd;
}

absl::StatusOr<std::string> SafetensorsHeaderFor(
    const StateDict& tensors, const std::map<std::string, std::string>& metadata,
    uint64_t* data_size) {
  Json root = Json::object();
  if (!metadata.empty()) {
    Json m = Json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    root[kMetadataKey] = std::move(m);
  }
  uint64_t offset = 0;
  for (const auto& [name, t] : DataOrder(tensors)) {
    if (name == kMetadataKey) {
      return absl::InvalidArgumentError("safetensors: a tensor may not be named \"__metadata__\"");
    }
    if (!t.defined()) {
      return absl::InvalidArgumentError(
          absl::StrCat("safetensors: tensor '", name, "' is undefined"));
    }
    if (t.device().is_meta()) {
      return absl::InvalidArgumentError(
          absl::StrCat("safetensors: tensor '", name, "' is a meta tensor (it has no data)"));
    }
    const uint64_t bytes = t.nbytes();
    root[name] = Json{{"dtype", SafetensorsDTypeName(t.dtype())},
                      {"shape", t.shape()},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string header;
  try {
    header = root.dump();
  } catch (const std::exception& e) {  // e.g. a name or metadata value that is not UTF-8
    return absl::InvalidArgumentError(absl::StrCat("safetensors: cannot encode header: ", e.what()));
  }
  header.append((8 - header.size() % 8) % 8, ' ');
  *data_size = offset;
  return header;
}

absl::StatusOr<std::string> SerializeSafetensors(
    const StateDict& tensors, const std::map<std::string, std::string>& metadata) {
  std::string out;
  CCTUNE_RETURN_IF_ERROR(WriteSafetensors(tensors, metadata, [&](const void* p, size_t n) {
    out.append(static_cast<const char*>(p), n);
    return absl::OkStatus();
  }));
  return out;
}

absl::Status SaveSafetensors(const std::string& path, const StateDict& tensors,
                             const std::map<std::string, std::string>& metadata) {
  CCTUNE_ASSIGN_OR_RETURN(std::unique_ptr<AtomicFileWriter> w, AtomicFileWriter::Create(path));
  CCTUNE_RETURN_IF_ERROR(WriteSafetensors(tensors, metadata, [&](const void* p, size_t n) {
    return w->Append(p, n);
  }));
  return w->Commit();
}

}  // namespace cctune
