// ActivationStore: what a training pass shares between the modules' Forward and Backward.
// Every module has one Forward for every mode; a training forward passes a store (and the
// module's own Activations struct, which keeps what its Backward reads), generation and
// evaluation pass none. The store holds:
//   - the gradient views of the parameters (f32, in the gradient arena's layout), by the
//     address of each parameter's bound tensor; a parameter without one is frozen (no
//     gradient is computed for it, dx still flows through it);
//   - this step's LoRA dropout: the Philox stream and each adapter's first mask word
//     (the trainer draws them, see training/decoder_trainer.h);
//   - reusable temporaries for the backward (and the adapters' forward), by slot, so that a
//     training step allocates nothing once the first one has sized them.
#ifndef CCTUNE_MODULES_ACTIVATION_STORE_H_
#define CCTUNE_MODULES_ACTIVATION_STORE_H_

#include <cstddef>
#include <cstdint>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/device.h"
#include "core/tensor.h"
#include "modules/scratch.h"

namespace cctune {

class Module;

// Temporaries live only within one module call, so one slot serves every layer. Slots used by
// nested calls (a FeedForward's and the LoRA adapter inside its projections) differ.
enum class StoreSlot : size_t {
  kLoraDropped,  // [rows, in] the adapter's dropped input (forward and backward)
  kLoraU,        // [rows, rank]
  kLoraDelta,    // [rows, out]
  kLoraDu,       // [rows, rank]
  kLoraDx,       // [rows, in]
  kFfDact,       // [b, s, f]
  kFfDgate,      // [b, s, f]
  kFfDup,        // [b, s, f]
  kAttnDattn,    // [b, s, n_h·h_d]
  kAttnDq,       // [b, s, n_h·h_d]
  kAttnDk,       // [b, s, n_kv·h_d]
  kAttnDv,       // [b, s, n_kv·h_d]
  kLayerDxn,     // [b, s, d]
  kLayerRecompute,  // [b, s, d] the recomputed layer output (discarded)
  kDecoderDh,    // [b, s, d]
  kNumSlots,
};

class ActivationStore {
 public:
  // Gradients: `grad` (f32, param's shape) receives += d(loss)/d(param).
  void SetGrad(const Tensor& param, Tensor grad) { grads_[&param] = std::move(grad); }
  // The gradient view of `param`, or null when it is frozen.
  Tensor* Grad(const Tensor& param);
  size_t num_grads() const { return grads_.size(); }

  // LoRA dropout of this step: `module` (a LoRALinear) drops its adapter's input with the mask
  // of Philox stream `seed` from word `offset` on (ops::Dropout).
  void ClearDropout() { dropout_.clear(); }
  void SetDropout(const Module* module, uint64_t seed, uint64_t offset);
  // The first mask word of `module`'s dropout in this step; null when it has none.
  const uint64_t* DropoutOffset(const Module* module) const;
  uint64_t dropout_seed() const { return dropout_seed_; }

  // An f32 contiguous tensor of `shape` on `device` over the slot's kept memory (contents
  // stale); ZeroTemp zeroes it in place.
  absl::StatusOr<Tensor> Temp(StoreSlot slot, Shape shape, const Device& device);
  absl::StatusOr<Tensor> ZeroTemp(StoreSlot slot, Shape shape, const Device& device);
  // Bytes held by the temporaries.
  size_t TempBytes() const { return temps_.Bytes(); }

 private:
  absl::flat_hash_map<const Tensor*, Tensor> grads_;
  absl::flat_hash_map<const Module*, uint64_t> dropout_;
  uint64_t dropout_seed_ = 0;
  Scratch temps_;
  Tensor device_zero_;  // one f32 0 on a non-CPU device, broadcast by ZeroInPlace
  friend absl::Status ZeroInPlace(Tensor& t, ActivationStore* store);
};

// Makes `t` an f32 contiguous tensor of `shape` on `device`, keeping its buffer when it is one
// already (its contents are then stale: for buffers the caller overwrites).
absl::Status EnsureF32(Tensor& t, const Shape& shape, const Device& device);
// t = 0 in place (contiguous t). Off the CPU it broadcasts a device-side 0 that `store` keeps
// (uploaded once), so it queues no host-to-device copy.
absl::Status ZeroInPlace(Tensor& t, ActivationStore* store);

}  // namespace cctune

#endif  // CCTUNE_MODULES_ACTIVATION_STORE_H_
