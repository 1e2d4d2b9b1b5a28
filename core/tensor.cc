#include "core/tensor.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/device_interface.h"

namespace cctune {

std::string ShapeToString(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

int64_t NumElements(absl::Span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

Shape ContiguousStrides(absl::Span<const int64_t> shape) {
  Shape strides(shape.size());
  int64_t s = 1;
  for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
    strides[i] = s;
    s *= std::max<int64_t>(shape[i], 1);
  }
  return strides;
}

namespace {
absl::Status CheckShape(const Shape& shape, const char* op) {
  if (shape.size() > static_cast<size_t>(kMaxDims)) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": shape ", ShapeToString(shape),
                                                   " has more than ", kMaxDims, " dims"));
  }
  for (int64_t s : shape) {
    if (s < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": negative size in shape ", ShapeToString(shape)));
    }
  }
  return absl::OkStatus();
}
}  // namespace

absl::StatusOr<Tensor> Tensor::Empty(Shape shape, DType dtype, Device device) {
  CCTUNE_RETURN_IF_ERROR(CheckShape(shape, "Tensor::Empty"));
  Tensor t;
  t.strides_ = ContiguousStrides(shape);
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.device_ = device;
  if (!device.is_meta()) {
    CCTUNE_ASSIGN_OR_RETURN(t.storage_, Storage::Allocate(device, t.nbytes()));
  }
  return t;
}

absl::StatusOr<Tensor> Tensor::Zeros(Shape shape, DType dtype, Device device) {
  return Full(std::move(shape), 0.0, dtype, device);
}

absl::StatusOr<Tensor> Tensor::Full(Shape shape, double value, DType dtype, Device device) {
  if (device.is_meta()) return Empty(std::move(shape), dtype, device);
  CCTUNE_ASSIGN_OR_RETURN(Tensor host, Empty(shape, dtype, Device::Cpu()));
  const size_t esz = DTypeSize(dtype);
  char* p = static_cast<char*>(host.raw_data());
  const int64_t n = host.numel();
  if (n > 0) {
    StoreFromDouble(p, dtype, 0, value);
    // Zero (every dtype's +0 is all-zero bytes) is a memset; other values repeat the first
    // element's bytes. Large buffers (gradients, activations) are filled by all threads, in
    // chunks of a few hundred KiB.
    bool zero_bytes = true;
    for (size_t j = 0; j < esz; ++j) zero_bytes = zero_bytes && p[j] == 0;
    constexpr int64_t kChunkBytes = int64_t{1} << 18;
    const int64_t bytes = n * static_cast<int64_t>(esz);
    const int64_t chunks = (bytes + kChunkBytes - 1) / kChunkBytes;
    if (!zero_bytes && n > 1) {
      // Seed the first chunk by doubling, then copy it over the rest.
      int64_t done = 1;
      const int64_t first = std::min<int64_t>(n, kChunkBytes / static_cast<int64_t>(esz));
      while (done < first) {
        const int64_t m = std::min(done, first - done);
        std::memcpy(p + done * esz, p, m * esz);
        done += m;
      }
    }
#pragma omp parallel for schedule(static) if (chunks > 4)
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t begin = c * kChunkBytes;
      const int64_t len = std::min(kChunkBytes, bytes - begin);
      if (zero_bytes) {
        std::memset(p + begin, 0, len);
      } else if (c > 0) {
        std::memcpy(p + begin, p, len);  // kChunkBytes is a multiple of every element size
      }
    }
  }
  if (device.is_cpu()) return host;
  return host.To(device);
}

absl::StatusOr<Tensor> Tensor::FromVector(absl::Span<const float> values, Shape shape,
                                          DType dtype) {
  if (NumElements(shape) != static_cast<int64_t>(values.size())) {
    return absl::InvalidArgumentError(absl::StrCat("FromVector: ", values.size(),
                                                   " values do not fill shape ",
                                                   ShapeToString(shape)));
  }
  CCTUNE_ASSIGN_OR_RETURN(Tensor t, Empty(std::move(shape), dtype));
  StridedView src = t.strided_view();
  src.data = const_cast<float*>(values.data());
  src.dtype = DType::kF32;
  StridedCopyCpu(t.strided_view(), src);
  return t;
}

absl::StatusOr<Tensor> Tensor::FromVector(absl::Span<const int64_t> values, Shape shape,
                                          DType dtype) {
  if (NumElements(shape) != static_cast<int64_t>(values.size())) {
    return absl::InvalidArgumentError(absl::StrCat("FromVector: ", values.size(),
                                                   " values do not fill shape ",
                                                   ShapeToString(shape)));
  }
  CCTUNE_ASSIGN_OR_RETURN(Tensor t, Empty(std::move(shape), dtype));
  StridedView src = t.strided_view();
  src.data = const_cast<int64_t*>(values.data());
  src.dtype = DType::kI64;
  StridedCopyCpu(t.strided_view(), src);
  return t;
}

absl::StatusOr<Tensor> Tensor::FromVector(absl::Span<const int32_t> values, Shape shape) {
  std::vector<int64_t> v(values.begin(), values.end());
  return FromVector(v, std::move(shape), DType::kI32);
}

absl::StatusOr<Tensor> Tensor::FromStorage(std::shared_ptr<Storage> storage, Shape shape,
                                           DType dtype, int64_t offset_elems) {
  CCTUNE_RETURN_IF_ERROR(CheckShape(shape, "Tensor::FromStorage"));
  const size_t need =
      (static_cast<size_t>(offset_elems) + static_cast<size_t>(NumElements(shape))) *
      DTypeSize(dtype);
  if (storage == nullptr || offset_elems < 0 || need > storage->bytes()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "FromStorage: ", ShapeToString(shape), " ", DTypeName(dtype), " at element offset ",
        offset_elems, " needs ", need, " bytes but the storage has ",
        storage ? storage->bytes() : 0));
  }
  Tensor t;
  t.device_ = storage->device();
  t.storage_ = std::move(storage);
  t.strides_ = ContiguousStrides(shape);
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.offset_ = offset_elems;
  return t;
}

int64_t Tensor::size(int d) const {
  const int nd = dim();
  if (d < 0) d += nd;
  CCTUNE_CHECK(d >= 0 && d < nd, "size(", d, ") of a ", nd, "-d tensor");
  return shape_[d];
}

int64_t Tensor::stride(int d) const {
  const int nd = dim();
  if (d < 0) d += nd;
  CCTUNE_CHECK(d >= 0 && d < nd, "stride(", d, ") of a ", nd, "-d tensor");
  return strides_[d];
}

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int i = dim() - 1; i >= 0; --i) {
    if (shape_[i] != 1 && strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

void* Tensor::raw_data() const {
  if (storage_ == nullptr) return nullptr;
  return static_cast<char*>(storage_->data()) + offset_ * static_cast<int64_t>(DTypeSize(dtype_));
}

StridedView Tensor::strided_view() const {
  StridedView v;
  v.data = raw_data();
  v.dtype = dtype_;
  v.ndim = dim();
  for (int i = 0; i < v.ndim; ++i) {
    v.shape[i] = shape_[i];
    v.strides[i] = strides_[i];
  }
  return v;
}

absl::StatusOr<int> Tensor::NormDim(int d, int ndim, const char* op) const {
  const int orig = d;
  if (d < 0) d += ndim;
  if (d < 0 || d >= ndim) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": dim ", orig, " out of range for shape ",
                                                   ShapeToString(shape_)));
  }
  return d;
}

absl::StatusOr<Tensor> Tensor::Slice(int dim_in, int64_t start, int64_t end, int64_t step) const {
  CCTUNE_ASSIGN_OR_RETURN(int d, NormDim(dim_in, dim(), "Slice"));
  if (step <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("Slice: step must be positive, got ", step));
  }
  const int64_t n = shape_[d];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Tensor t = *this;
  t.offset_ += start * strides_[d];
  t.shape_[d] = (end - start + step - 1) / step;
  t.strides_[d] = strides_[d] * step;
  return t;
}

absl::StatusOr<Tensor> Tensor::Narrow(int dim_in, int64_t start, int64_t length) const {
  CCTUNE_ASSIGN_OR_RETURN(int d, NormDim(dim_in, dim(), "Narrow"));
  if (start < 0 || length < 0 || start + length > shape_[d]) {
    return absl::OutOfRangeError(absl::StrCat("Narrow: [", start, ", ", start + length,
                                              ") out of range for dim ", d, " of shape ",
                                              ShapeToString(shape_)));
  }
  Tensor t = *this;
  t.offset_ += start * strides_[d];
  t.shape_[d] = length;
  return t;
}

absl::StatusOr<Tensor> Tensor::Select(int dim_in, int64_t index) const {
  CCTUNE_ASSIGN_OR_RETURN(int d, NormDim(dim_in, dim(), "Select"));
  if (index < 0) index += shape_[d];
  if (index < 0 || index >= shape_[d]) {
    return absl::OutOfRangeError(absl::StrCat("Select: index ", index, " out of range for dim ",
                                              d, " of shape ", ShapeToString(shape_)));
  }
  Tensor t = *this;
  t.offset_ += index * strides_[d];
  t.shape_.erase(t.shape_.begin() + d);
  t.strides_.erase(t.strides_.begin() + d);
  return t;
}

absl::StatusOr<Tensor> Tensor::Transpose(int d0_in, int d1_in) const {
  CCTUNE_ASSIGN_OR_RETURN(int d0, NormDim(d0_in, dim(), "Transpose"));
  CCTUNE_ASSIGN_OR_RETURN(int d1, NormDim(d1_in, dim(), "Transpose"));
  Tensor t = *this;
  std::swap(t.shape_[d0], t.shape_[d1]);
  std::swap(t.strides_[d0], t.strides_[d1]);
  return t;
}

absl::StatusOr<Tensor> Tensor::Permute(absl::Span<const int> dims) const {
  if (static_cast<int>(dims.size()) != dim()) {
    return absl::InvalidArgumentError(absl::StrCat("Permute: ", dims.size(),
                                                   " dims given for shape ",
                                                   ShapeToString(shape_)));
  }
  std::vector<bool> seen(dim(), false);
  Tensor t = *this;
  for (int i = 0; i < dim(); ++i) {
    CCTUNE_ASSIGN_OR_RETURN(int d, NormDim(dims[i], dim(), "Permute"));
    if (seen[d]) {
      return absl::InvalidArgumentError(
          absl::StrCat("Permute: dim ", d, " repeated in [", absl::StrJoin(dims, ", "), "]"));
    }
    seen[d] = true;
    t.shape_[i] = shape_[d];
    t.strides_[i] = strides_[d];
  }
  return t;
}

namespace {
// Resolves a single -1 entry against `numel`.
absl::StatusOr<Shape> InferShape(Shape shape, int64_t numel, const Shape& from, const char* op) {
  int infer = -1;
  int64_t known = 1;
  for (int i = 0; i < static_cast<int>(shape.size()); ++i) {
    if (shape[i] == -1) {
      if (infer >= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(op, ": more than one -1 in ", ShapeToString(shape)));
      }
      infer = i;
    } else if (shape[i] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": negative size in ", ShapeToString(shape)));
    } else {
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || numel % known != 0) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": cannot infer -1 in ",
                                                     ShapeToString(shape), " for ", numel,
                                                     " elements"));
    }
    shape[infer] = numel / known;
  } else if (known != numel) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": shape ", ShapeToString(shape), " (",
                                                   known, " elements) is incompatible with ",
                                                   ShapeToString(from), " (", numel, ")"));
  }
  return shape;
}
}  // namespace

absl::StatusOr<Tensor> Tensor::View(Shape new_shape) const {
  CCTUNE_ASSIGN_OR_RETURN(new_shape, InferShape(std::move(new_shape), numel(), shape_, "View"));
  CCTUNE_RETURN_IF_ERROR(CheckShape(new_shape, "View"));
  // Walk groups of old dims that are contiguous among themselves and match them with groups of
  // new dims of the same element count (the rule torch.view uses).
  Shape new_strides(new_shape.size(), 1);
  if (numel() == 0) {
    new_strides = ContiguousStrides(new_shape);
  } else {
    // Old dims without size-1 entries (inline: a view allocates nothing).
    Shape os, ost;
    for (int i = 0; i < dim(); ++i) {
      if (shape_[i] != 1) {
        os.push_back(shape_[i]);
        ost.push_back(strides_[i]);
      }
    }
    size_t oi = 0;
    int ni = 0;
    const int nn = static_cast<int>(new_shape.size());
    while (ni < nn) {
      if (new_shape[ni] == 1) {
        new_strides[ni] = 1;
        ++ni;
        continue;
      }
      if (oi >= os.size()) break;
      // Take a chunk of old dims that is internally contiguous.
      size_t oj = oi;
      int64_t chunk = os[oi];
      while (oj + 1 < os.size() && ost[oj] == ost[oj + 1] * os[oj + 1]) {
        ++oj;
        chunk *= os[oj];
      }
      // Consume new dims until they cover exactly `chunk` elements.
      int64_t acc = 1;
      int nj = ni;
      while (nj < nn && acc < chunk) acc *= new_shape[nj++];
      if (acc != chunk) {
        return absl::InvalidArgumentError(absl::StrCat(
            "View: shape ", ShapeToString(new_shape), " is not compatible with the strides ",
            ShapeToString(strides_), " of ", ShapeToString(shape_),
            " (use Reshape, which copies)"));
      }
      int64_t s = ost[oj];
      for (int k = nj - 1; k >= ni; --k) {
        new_strides[k] = s;
        s *= new_shape[k];
      }
      ni = nj;
      oi = oj + 1;
    }
    for (; ni < nn; ++ni) new_strides[ni] = 1;
  }
  Tensor t = *this;
  t.shape_ = std::move(new_shape);
  t.strides_ = std::move(new_strides);
  return t;
}

absl::StatusOr<Tensor> Tensor::Expand(Shape target) const {
  if (target.size() < shape_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("Expand: target ", ShapeToString(target),
                                                   " has fewer dims than ",
                                                   ShapeToString(shape_)));
  }
  CCTUNE_RETURN_IF_ERROR(CheckShape(Shape(target.size(), 0), "Expand"));
  const int lead = static_cast<int>(target.size() - shape_.size());
  Shape strides(target.size(), 0);
  for (int i = 0; i < static_cast<int>(target.size()); ++i) {
    if (i < lead) {
      if (target[i] < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("Expand: -1 is not allowed in a new leading dim: ",
                         ShapeToString(target)));
      }
      strides[i] = 0;
      continue;
    }
    const int64_t have = shape_[i - lead];
    if (target[i] == -1) target[i] = have;
    if (target[i] == have) {
      strides[i] = strides_[i - lead];
    } else if (have == 1) {
      strides[i] = 0;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("Expand: cannot expand ",
                                                     ShapeToString(shape_), " to ",
                                                     ShapeToString(target), " (dim ", i,
                                                     " has size ", have, ", not 1)"));
    }
  }
  Tensor t = *this;
  t.shape_ = std::move(target);
  t.strides_ = std::move(strides);
  return t;
}

absl::StatusOr<Tensor> Tensor::Unsqueeze(int dim_in) const {
  CCTUNE_ASSIGN_OR_RETURN(int d, NormDim(dim_in, dim() + 1, "Unsqueeze"));
  Tensor t = *this;
  const int64_t st = d < dim() ? strides_[d] * shape_[d] : 1;
  t.shape_.insert(t.shape_.begin() + d, 1);
  t.strides_.insert(t.strides_.begin() + d, st);
  if (t.dim() > kMaxDims) {
    return absl::InvalidArgumentError(absl::StrCat("Unsqueeze: more than ", kMaxDims, " dims"));
  }
  return t;
}

absl::StatusOr<Tensor> Tensor::Squeeze(int dim_in) const {
  CCTUNE_ASSIGN_OR_RETURN(int d, NormDim(dim_in, dim(), "Squeeze"));
  if (shape_[d] != 1) {
    return absl::InvalidArgumentError(absl::StrCat("Squeeze: dim ", d, " of ",
                                                   ShapeToString(shape_), " is not 1"));
  }
  Tensor t = *this;
  t.shape_.erase(t.shape_.begin() + d);
  t.strides_.erase(t.strides_.begin() + d);
  return t;
}

absl::StatusOr<Tensor> Tensor::Reshape(Shape shape) const {
  auto v = View(shape);
  if (v.ok()) return v;
  CCTUNE_ASSIGN_OR_RETURN(Tensor c, Contiguous());
  return c.View(std::move(shape));
}

absl::StatusOr<Tensor> Tensor::Contiguous() const {
  if (is_contiguous()) return *this;
  return Clone();
}

absl::StatusOr<Tensor> Tensor::Clone() const {
  CCTUNE_ASSIGN_OR_RETURN(Tensor t, Empty(shape_, dtype_, device_));
  CCTUNE_RETURN_IF_ERROR(t.CopyFrom(*this));
  return t;
}

absl::StatusOr<Tensor> Tensor::To(const Device& device) const {
  if (device == device_) return *this;
  CCTUNE_ASSIGN_OR_RETURN(Tensor t, Empty(shape_, dtype_, device));
  CCTUNE_RETURN_IF_ERROR(t.CopyFrom(*this));
  return t;
}

absl::StatusOr<Tensor> Tensor::To(DType dtype) const {
  if (dtype == dtype_) return *this;
  CCTUNE_ASSIGN_OR_RETURN(Tensor t, Empty(shape_, dtype, device_));
  CCTUNE_RETURN_IF_ERROR(t.CopyFrom(*this));
  return t;
}

absl::Status Tensor::CopyFrom(const Tensor& src) {
  if (src.shape_ != shape_) {
    return absl::InvalidArgumentError(absl::StrCat("CopyFrom: source shape ",
                                                   ShapeToString(src.shape_),
                                                   " != destination shape ",
                                                   ShapeToString(shape_)));
  }
  if (device_.is_meta() || src.device_.is_meta()) {
    if (device_.is_meta()) return absl::OkStatus();  // nothing to write
    return absl::FailedPreconditionError("CopyFrom: the source is a meta tensor (no data)");
  }
  if (numel() == 0) return absl::OkStatus();
  if (src.device_ == device_) {
    CCTUNE_ASSIGN_OR_RETURN(DeviceInterface * iface, GetDeviceInterface(device_.type));
    return iface->StridedCopy(strided_view(), src.strided_view(), device_.index);
  }
  // Across devices: make a contiguous source of the destination dtype on the source device,
  // move the bytes, then scatter into the destination's layout if it is not contiguous.
  Tensor staged_src = src;
  if (!src.is_contiguous() || src.dtype_ != dtype_) {
    CCTUNE_ASSIGN_OR_RETURN(staged_src, Empty(shape_, dtype_, src.device_));
    CCTUNE_RETURN_IF_ERROR(staged_src.CopyFrom(src));
  }
  Tensor staged_dst = *this;
  if (!is_contiguous()) {
    CCTUNE_ASSIGN_OR_RETURN(staged_dst, Empty(shape_, dtype_, device_));
  }
  const size_t bytes = nbytes();
  if (src.device_.is_cpu()) {
    CCTUNE_ASSIGN_OR_RETURN(DeviceInterface * iface, GetDeviceInterface(device_.type));
    CCTUNE_RETURN_IF_ERROR(iface->CopyFromHost(staged_dst.raw_data(), staged_src.raw_data(),
                                               bytes, device_.index));
  } else if (device_.is_cpu()) {
    CCTUNE_ASSIGN_OR_RETURN(DeviceInterface * iface, GetDeviceInterface(src.device_.type));
    CCTUNE_RETURN_IF_ERROR(iface->CopyToHost(staged_dst.raw_data(), staged_src.raw_data(),
                                             bytes, src.device_.index));
  } else {  // device to device through the host
    CCTUNE_ASSIGN_OR_RETURN(Tensor host, staged_src.To(Device::Cpu()));
    CCTUNE_RETURN_IF_ERROR(staged_dst.CopyFrom(host));
  }
  if (!is_contiguous()) return CopyFrom(staged_dst);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<double>> Tensor::ToDoubleVector() const {
  CCTUNE_ASSIGN_OR_RETURN(Tensor host, To(Device::Cpu()));
  CCTUNE_ASSIGN_OR_RETURN(host, host.Contiguous());
  std::vector<double> out(host.numel());
  for (int64_t i = 0; i < host.numel(); ++i) out[i] = LoadAsDouble(host.raw_data(), dtype_, i);
  return out;
}

absl::StatusOr<std::vector<float>> Tensor::ToFloatVector() const {
  CCTUNE_ASSIGN_OR_RETURN(std::vector<double> d, ToDoubleVector());
  return std::vector<float>(d.begin(), d.end());
}

absl::StatusOr<std::vector<int64_t>> Tensor::ToInt64Vector() const {
  CCTUNE_ASSIGN_OR_RETURN(Tensor host, To(Device::Cpu()));
  CCTUNE_ASSIGN_OR_RETURN(host, host.To(DType::kI64));
  CCTUNE_ASSIGN_OR_RETURN(host, host.Contiguous());
  const int64_t* p = host.data<int64_t>();
  return std::vector<int64_t>(p, p + host.numel());
}

std::string Tensor::DebugString(int max_elems) const {
  std::string s = absl::StrCat("Tensor(", ShapeToString(shape_), ", ", DTypeName(dtype_), ", ",
                               device_.ToString());
  if (!defined() || device_.is_meta()) return s + ")";
  auto v = ToDoubleVector();
  if (!v.ok()) return s + ", <unreadable>)";
  s += ", [";
  for (int64_t i = 0; i < std::min<int64_t>(max_elems, v->size()); ++i) {
    absl::StrAppend(&s, i ? ", " : "", (*v)[i]);
  }
  if (static_cast<int64_t>(v->size()) > max_elems) s += ", ...";
  return s + "])";
}

}  // namespace cctune
