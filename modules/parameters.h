// Parameter arena: every parameter of a model in ONE contiguous buffer per dtype on one
// device, handed out as named views (llm.c style). A checkpoint maps onto it by name, and a
// fused optimizer step or a single all-reduce can later cover each buffer in one pass.
//
//   auto model = BuildModel("torchtune.models.llama3_2.llama3_2_1b");  // declares, allocates nothing
//   CCTUNE_ASSIGN_OR_RETURN(ParameterArena arena,
//                           ParameterArena::Create(*model, DType::kBF16, Device::Cpu()));
//   CCTUNE_RETURN_IF_ERROR(arena.LoadStateDict(state_dict).status());
//
// On Device::Meta() nothing is allocated: a 405B model can be built and counted.
// For inference, ParameterArena::CreateViewing loads without copying: parameters whose
// checkpoint tensor already has the run's dtype view the (mapped) checkpoint memory, and only
// the others get owned buffer space.
// The layout is a value (ParameterLayout) so that gradients or optimizer moments can get an
// arena with the same names, shapes and order (ParameterArena::Allocate(layout.WithDType(..))).
#ifndef CCTUNE_MODULES_PARAMETERS_H_
#define CCTUNE_MODULES_PARAMETERS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "checkpoint/state_dict.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/random.h"
#include "core/tensor.h"
#include "modules/module.h"

namespace cctune {

// Each parameter starts on a multiple of kParameterAlignmentElements ELEMENTS inside its
// buffer, whatever the dtype, so that a layout and its WithDType(..) copy (bf16 weights, f32
// gradients and optimizer moments) have identical element offsets: one flat index addresses
// the same parameter element in every arena. 32 elements keep every dtype of 2 bytes or more on
// a kParameterAlignmentBytes boundary (a cache line, one AVX-512 vector). Padding is counted
// in Bytes() but not in NumParameters().
constexpr size_t kParameterAlignmentBytes = 64;
constexpr int64_t kParameterAlignmentElements = 32;

struct ParameterSpec {
  std::string name;
  Shape shape;
  DType dtype = DType::kF32;
  ParameterInit init;
};

class ParameterLayout {
 public:
  struct Entry {
    ParameterSpec spec;
    int buffer = 0;      // index into buffers()
    int64_t offset = 0;  // in elements, from the start of the buffer
    int64_t numel = 0;
  };
  struct Buffer {
    DType dtype = DType::kF32;
    int64_t numel = 0;  // including alignment padding
  };

  ParameterLayout() = default;
  // Lays out `specs` in order; one buffer per dtype, in order of first appearance.
  // Duplicate or empty names and negative sizes are InvalidArgument.
  static absl::StatusOr<ParameterLayout> Create(std::vector<ParameterSpec> specs);
  // The parameters `module` declares; those without a dtype get `default_dtype`.
  static absl::StatusOr<ParameterLayout> FromModule(const Module& module, DType default_dtype);

  const std::vector<Entry>& entries() const { return entries_; }
  const std::vector<Buffer>& buffers() const { return buffers_; }
  // The entry called `name`, or nullptr.
  const Entry* Find(const std::string& name) const;
  int64_t NumParameters() const;  // elements, without padding
  size_t Bytes() const;           // all buffers, with padding
  // Same names, shapes and order, every parameter in `dtype` (e.g. f32 gradients or
  // optimizer moments for bf16 weights).
  ParameterLayout WithDType(DType dtype) const;
  // The same entries with every buffer's numel rounded up to a multiple of `multiple` (>= 1);
  // the extra elements are padding (e.g. to cut a buffer into equal shards, distributed/fsdp.h).
  ParameterLayout PadBuffersTo(int64_t multiple) const;

 private:
  std::vector<Entry> entries_;
  std::vector<Buffer> buffers_;
  absl::flat_hash_map<std::string, int> index_;
};

class ParameterArena {
 public:
  // What LoadStateDict found. With strict=false, missing and unexpected names are reported
  // here instead of failing; shape mismatches always fail.
  struct LoadReport {
    std::vector<std::string> loaded;
    std::vector<std::string> missing;     // in the model, not in the state dict
    std::vector<std::string> unexpected;  // in the state dict, not in the model
  };

  ParameterArena() = default;

  // Lays out `module`'s parameters, allocates the buffers on `device` (nothing on meta;
  // parameter contents uninitialised, padding zero) and binds the views into the module.
  static absl::StatusOr<ParameterArena> Create(Module& module, DType default_dtype,
                                               const Device& device);
  // Zero-copy loading, for inference: as Create followed by LoadStateDict(state_dict, strict),
  // except that a parameter whose state-dict tensor already has the parameter's dtype and
  // shape, lies on `device` and is contiguous is not copied: its view IS that tensor, sharing
  // its storage (e.g. a mapped checkpoint file, which then stays mapped while the arena lives).
  // Only the other parameters get owned buffers (buffers() covers those alone, and
  // viewed_bytes() counts the rest), so the weights are in memory once. The views may be
  // copy-on-write file mappings: writing into them never changes the file, but an arena for
  // training wants its own buffers (Create + LoadStateDict). With view_mapped_files false,
  // tensors of mapped files are copied all the same (onto the arena's huge pages) and only
  // tensors in memory of their own (e.g. weights quantized at load) are viewed.
  static absl::StatusOr<ParameterArena> CreateViewing(Module& module, const StateDict& state_dict,
                                                      DType default_dtype, const Device& device,
                                                      bool view_mapped_files = true);
  // An arena with `layout`, bound to no module (gradients, optimizer state). Zero-filled.
  static absl::StatusOr<ParameterArena> Allocate(ParameterLayout layout, const Device& device);

  // Points every parameter of `module` at this arena's views. The module's parameters must
  // match the layout exactly (names, shapes, dtypes): InvalidArgument naming the first
  // difference otherwise.
  absl::Status Bind(Module& module) const;

  const ParameterLayout& layout() const { return layout_; }
  const Device& device() const { return device_; }
  int64_t NumParameters() const { return layout_.NumParameters(); }
  size_t Bytes() const { return layout_.Bytes(); }
  // One flat tensor [numel] per buffer of the layout (what a fused optimizer or an
  // all-reduce walks). For an arena from CreateViewing: the buffers of the copied parameters
  // only (possibly none).
  const std::vector<Tensor>& buffers() const { return buffers_; }
  // Bytes of parameters that view memory the arena does not own (CreateViewing); 0 otherwise.
  size_t viewed_bytes() const { return viewed_bytes_; }
  // (name, view) in layout order.
  const std::vector<std::pair<std::string, Tensor>>& named_tensors() const { return tensors_; }
  // The view called `name`, or NotFound naming it.
  absl::StatusOr<Tensor> Get(const std::string& name) const;

  // Fills every parameter by its ParameterInit, deterministically for `gen`'s state.
  // FailedPrecondition for an arena that views memory it does not own (CreateViewing).
  absl::Status InitializeRandom(Generator& gen);
  // Sets every buffer (padding included) to zero. FailedPrecondition as InitializeRandom.
  absl::Status Zero();

  // Copies the state dict's tensors into the arena, converting dtypes and moving across
  // devices as needed. Everything is validated before anything is written. Errors list the
  // missing and unexpected names and every shape mismatch with both shapes. A parameter that
  // already is its state-dict tensor (CreateViewing) is left alone. A tensor of a mapped file
  // (Storage::file_mapped) is copied in row blocks of about 8 MB, each block's pages released
  // once copied (Storage::ReleasePages): a converting load holds one copy of the weights plus
  // one block.
  absl::StatusOr<LoadReport> LoadStateDict(const StateDict& state_dict, bool strict = true);
  // Views (not copies) of every parameter, by name.
  StateDict ExportStateDict() const;

 private:
  // Buffers and views for `layout` on `device`; contents uninitialised.
  // Padding stays zero, so whole-buffer passes (checksums, all-reduce) see defined values.
  static absl::StatusOr<ParameterArena> Materialize(ParameterLayout layout, const Device& device);
  absl::Status ZeroPadding();
  // LoadStateDict's checks: every problem, before anything is written.
  absl::Status CheckStateDict(const StateDict& state_dict, bool strict, LoadReport& report) const;
  absl::Status RefuseIfViewing(const char* what) const;

  ParameterLayout layout_;
  Device device_ = Device::Cpu();
  std::vector<Tensor> buffers_;
  std::vector<std::pair<std::string, Tensor>> tensors_;
  size_t viewed_bytes_ = 0;
};

}  // namespace cctune

#endif  // CCTUNE_MODULES_PARAMETERS_H_
