// Reusable activation buffers for a module's forward pass. Slot i hands out a contiguous
// tensor of the requested shape over memory kept from the previous call, and reallocates only
// when it needs more room, another dtype or another device, so decode steps run without
// allocations after the first. A tensor from Get(i) is overwritten by the next Get(i) user:
// keep it only as long as the forward call that asked for it.
//
// Modules that never run at the same time may share buffers: Share() makes Get(i) hand out
// slot first_slot + i of a common Scratch. A TransformerDecoder gives all its layers one pool
// (each layer's norms, attention and feed-forward on slots of their own, the same for every
// layer), so inference holds one layer's activations instead of one set per layer: for a
// 16-layer 1.1B model at a 128-token prompt, 11 MiB instead of 176 MiB, which the first
// prefill also no longer spends ~45,000 page faults zeroing (docs/generation.md).
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
  // Bytes held by all its own slots (0 while shared).
  size_t Bytes() const;
  // Drops every buffer (its own; a shared pool keeps its buffers).
  void Clear() { slots_.clear(); }
  // From now on Get(i) hands out slot first_slot + i of `pool` (nullptr: buffers of its own
  // again); the buffers held so far are dropped.
  void Share(std::shared_ptr<Scratch> pool, size_t first_slot);
  bool shared() const { return pool_ != nullptr; }

 private:
  std::vector<std::shared_ptr<Storage>> slots_;
  std::shared_ptr<Scratch> pool_;
  size_t first_slot_ = 0;
};

}  // namespace cctune

#endif  // CCTUNE_MODULES_SCRATCH_H_
