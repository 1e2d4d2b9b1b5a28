// Tensor: a strided view (shape, strides, offset, dtype) over shared device storage.
// View operations (Slice, Narrow, Select, Transpose, Permute, View, Expand, Unsqueeze,
// Squeeze) never copy. Contiguous(), To() and Clone() copy when they must. Shapes and strides
// are in elements. Shape errors come back as Status naming the operation and the values.
#ifndef CCTUNE_CORE_TENSOR_H_
#define CCTUNE_CORE_TENSOR_H_

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/status.h"
#include "core/storage.h"
#include "core/strided.h"

namespace cctune {

// Sizes or strides, one per dimension, held inline up to kMaxDims (core/strided.h): making or
// copying a tensor view allocates nothing on the heap (decode runs hundreds of views per token;
// generation/decode_allocations_test). More dimensions spill to the heap. The interface is
// std::vector's (absl::InlinedVector), but it is not a std::vector: convert explicitly
// (Shape(v.begin(), v.end()), std::vector<int64_t>(s.begin(), s.end())) where one is needed.
using Shape = absl::InlinedVector<int64_t, kMaxDims>;

std::string ShapeToString(absl::Span<const int64_t> shape);  // "[2, 3, 4]"
int64_t NumElements(absl::Span<const int64_t> shape);
Shape ContiguousStrides(absl::Span<const int64_t> shape);

class Tensor {
 public:
  Tensor() = default;  // undefined tensor

  // Uninitialised memory on `device` (a meta device allocates nothing).
  static absl::StatusOr<Tensor> Empty(Shape shape, DType dtype, Device device = Device::Cpu());
  static absl::StatusOr<Tensor> Zeros(Shape shape, DType dtype, Device device = Device::Cpu());
  static absl::StatusOr<Tensor> Full(Shape shape, double value, DType dtype,
                                     Device device = Device::Cpu());
  // A CPU tensor holding a copy of `values` (row-major), converted to `dtype`.
  static absl::StatusOr<Tensor> FromVector(absl::Span<const float> values, Shape shape,
                                           DType dtype = DType::kF32);
  static absl::StatusOr<Tensor> FromVector(absl::Span<const int64_t> values, Shape shape,
                                           DType dtype = DType::kI64);
  static absl::StatusOr<Tensor> FromVector(absl::Span<const int32_t> values, Shape shape);
  // A tensor over existing storage (used by checkpoint loaders for zero-copy mmap).
  static absl::StatusOr<Tensor> FromStorage(std::shared_ptr<Storage> storage, Shape shape,
                                            DType dtype, int64_t offset_elems = 0);

  bool defined() const { return storage_ != nullptr || device_.is_meta(); }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int dim() const { return static_cast<int>(shape_.size()); }
  // Size / stride of dimension d; negative d counts from the end. d must be in range.
  int64_t size(int d) const;
  int64_t stride(int d) const;
  DType dtype() const { return dtype_; }
  const Device& device() const { return device_; }
  int64_t numel() const { return NumElements(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * DTypeSize(dtype_); }
  int64_t offset() const { return offset_; }
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  bool is_contiguous() const;
  bool SharesStorageWith(const Tensor& other) const {
    return storage_ != nullptr && storage_ == other.storage_;
  }

  // Address of element [0,...,0]; null for meta tensors.
  void* raw_data() const;
  template <typename T>
  T* data() const {
    CCTUNE_CHECK(DTypeOf<T>::value == dtype_, "data<", DTypeName(DTypeOf<T>::value),
                 ">() on a ", DTypeName(dtype_), " tensor");
    return static_cast<T*>(raw_data());
  }
  StridedView strided_view() const;

  // ---- Views (no copy). Negative dims count from the end. ----
  absl::StatusOr<Tensor> Slice(int dim, int64_t start, int64_t end, int64_t step = 1) const;
  absl::StatusOr<Tensor> Narrow(int dim, int64_t start, int64_t length) const;
  absl::StatusOr<Tensor> Select(int dim, int64_t index) const;  // drops `dim`
  absl::StatusOr<Tensor> Transpose(int dim0, int dim1) const;
  absl::StatusOr<Tensor> Permute(absl::Span<const int> dims) const;
  // Reinterprets the shape; one entry may be -1. Fails when the strides do not allow it.
  absl::StatusOr<Tensor> View(Shape shape) const;
  // Broadcast size-1 dimensions (stride 0); -1 keeps a size; new leading dims allowed.
  absl::StatusOr<Tensor> Expand(Shape shape) const;
  absl::StatusOr<Tensor> Unsqueeze(int dim) const;
  absl::StatusOr<Tensor> Squeeze(int dim) const;

  // ---- Copies ----
  // View() when possible, otherwise a contiguous copy with the new shape.
  absl::StatusOr<Tensor> Reshape(Shape shape) const;
  // This tensor when already contiguous, otherwise a contiguous copy on the same device.
  absl::StatusOr<Tensor> Contiguous() const;
  absl::StatusOr<Tensor> To(const Device& device) const;  // no copy if already there
  absl::StatusOr<Tensor> To(DType dtype) const;           // no copy if already that dtype
  absl::StatusOr<Tensor> Clone() const;                   // always a new contiguous copy
  // Copies (and casts) `src` into this tensor's memory; shapes must match; any devices.
  absl::Status CopyFrom(const Tensor& src);

  // ---- Host access, for tests and tools (copies to CPU when needed) ----
  absl::StatusOr<std::vector<float>> ToFloatVector() const;
  absl::StatusOr<std::vector<double>> ToDoubleVector() const;
  absl::StatusOr<std::vector<int64_t>> ToInt64Vector() const;
  std::string DebugString(int max_elems = 16) const;

 private:
  std::shared_ptr<Storage> storage_;
  Shape shape_;
  Shape strides_;
  int64_t offset_ = 0;  // elements
  DType dtype_ = DType::kF32;
  Device device_ = Device::Cpu();

  absl::StatusOr<int> NormDim(int d, int ndim, const char* op) const;
};

}  // namespace cctune

#endif  // CCTUNE_CORE_TENSOR_H_
