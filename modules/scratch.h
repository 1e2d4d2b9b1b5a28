// Reusable activation buffers for a module's forward pass. Slot i hands out a contiguous
// tensor of the requested shape over memory kept from the previous call, and reallocates only
// when it needs more room, another dtype or another device, so decode steps run without
// allocations after the first. A tensor from Get(i) is overwritten by the next Get(i) user:
// keep it only as long as the forward call that asked for it.
#ifndef CCTUNE_MODULES_SCRATCH_H_
#define CCTUNE_MODULES_SCRATCH_H_

#include <cstddef>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/storage.h"
#include "core/tensor.h"

namespace cctune {

class Scratch {
 public:
  // A contiguous tensor of `shape` and `dtype` on `device` (a meta tensor on meta).
  absl::StatusOr<Tensor> Get(size_t slot, Shape shape, DType dtype, const Device& device);
  // Bytes held by all slots.
  size_t Bytes() const;
  // Drops every buffer.
  void Clear() { slots_.clear(); }

 private:
  std::vector<std::shared_ptr<Storage>> slots_;
};

}  // namespace cctune

#endif  // CCTUNE_MODULES_SCRATCH_H_
