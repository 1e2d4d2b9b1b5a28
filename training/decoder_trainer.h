// DecoderTrainer: one training pass of a TransformerDecoder, as a loop over the modules' own
// Forward and Backward (modules/*.h; no forward math here):
//
//   1. the decoder's Forward with saved activations (TransformerDecoder::ForwardHidden with an
//      Activations struct and the step's ActivationStore), up to the final norm;
//   2. the fused output projection + cross-entropy and its backward, in row chunks, so no
//      [b·s, v] logits buffer exists beyond one chunk;
//   3. the decoder's Backward: the final norm's, then each layer's in reverse, then the
//      embedding's, adding every parameter gradient into the gradient arena.
//
//   DecoderTrainer trainer = ...Create(model, grads);     // grads: f32 arena, model's layout
//   CCTUNE_ASSIGN_OR_RETURN(LossSum l, trainer.ForwardBackward(tokens, labels));
//   // every parameter gradient of l.loss_sum / l.num_valid is now ADDED into `grads`
//
// Each layer saves the inputs of both norms, the normalised inputs, q/k (after RoPE) and v, the
// attention output and its log-sum-exp, and the SwiGLU gate/up/product. With activation
// checkpointing only each layer's input is kept and the layer's Backward recomputes its
// forward (with the same ops, so the gradients are bit-identical). The loss is a mean
// cross-entropy over `labels` (already shifted by the caller; ignore_index -100).
//
// Steady state allocates nothing: the activations, the backward's temporaries (in the
// ActivationStore), the logits chunk and the per-chunk losses live in a workspace reused by
// every call of the same shapes, and the buffers that must start at zero are zeroed in place.
//
// Gradients ACCUMULATE into the arena, so several micro-batches add up: pass the total number
// of valid labels of the whole step as `normalizer` so that their sum is the full batch's mean
// gradient. Tied output projections add their gradient to tok_embeddings.weight.
//
// LoRA: LoRALinear projections (modules/lora_linear.h) anywhere a Linear is, including the
// output, get their adapter's forward and backward; with a gradient arena holding only the
// adapters (models/lora.h LoRATrainableLayout) and frozen_if_missing, only they get gradients
// (the frozen base weights still pass dx through).
//
// LoRA dropout (torchtune's LoRALinear: the adapter reads dropout(x), the base path x): in
// ForwardBackward every unmerged adapter with dropout p > 0 drops each element of its input
// [b·s, in] with probability p and scales the rest by 1/(1-p), with a mask of its own drawn
// from the trainer's Generator (set_generator): the adapters take consecutive blocks of
// b·s·in Philox words from the generator's offset, in the order layers.0.attn.q_proj, k_proj,
// v_proj, output_proj, mlp.w1, w2, w3, layers.1..., then the output projection, element i of
// an adapter's row-major input using word (block start + i) (ops::Dropout), and the generator
// advances past them all. So a step's masks are a function of the generator's state, which a
// recipe saves and restores for an exact resume. The backward and activation checkpointing's
// recompute regenerate the same masks; Loss() (validation) applies no dropout.
//
// Devices: everything runs on the device of the model's weights (cpu or cuda:N), with the
// gradient arena on it too. Batches may be passed on the host (they are copied over); the
// chunks' losses stay on the device and are read back once per call, after the backward is
// queued. Labels passed on the device cost one more read (for the valid-label count).
//
// Sharded parameters (distributed/fsdp.h): the model's parameter hook
// (TransformerDecoder::set_parameter_hook) also runs before the output projection (stage
// num_layers() + 1); with it set, a batch without valid labels still runs the backward, so
// every rank makes the same collectives.
//
// Supported: GQA/MQA, q/k/v (and any other Linear) biases, tied or untied output, RoPE of any
// flavour, an explicit bool mask [b, s, s] (packing) and input_pos [b, s] or [s]. Not
// supported (Unimplemented from Create): q_norm/k_norm inside attention.
#ifndef CCTUNE_TRAINING_DECODER_TRAINER_H_
#define CCTUNE_TRAINING_DECODER_TRAINER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/random.h"
#include "core/tensor.h"
#include "modules/activation_store.h"
#include "modules/linear.h"
#include "modules/lora_linear.h"
#include "modules/parameters.h"
#include "modules/transformer_decoder.h"

namespace cctune {

struct DecoderTrainerOptions {
  // Keep only each layer's input; recompute the layer's forward in the backward.
  bool activation_checkpointing = false;
  // Rows of logits computed at once by the fused output projection + cross-entropy;
  // 0 picks about 16M logits per chunk.
  int64_t logits_chunk_rows = 0;
  // torchtune's CEWithChunkedOutputLoss(num_output_chunks): cut the b·s rows of each call
  // into this many chunks, as torch.chunk does (ceil(b·s / n) rows each, the last one
  // smaller, so fewer chunks when b·s is not a multiple). 0: logits_chunk_rows decides.
  // Setting both is InvalidArgument.
  int64_t num_output_chunks = 0;
  // Parameters that the gradient arena lacks are frozen (no gradient computed) instead of an
  // error: the arena may hold any subset of the model's parameters, by name.
  bool frozen_if_missing = false;
};

// The summed loss of a batch and its number of labels that are not ignore_index; the mean
// loss is loss_sum / num_valid.
struct LossSum {
  double loss_sum = 0.0;
  int64_t num_valid = 0;
  // Host wall-clock seconds of the decoder's forward up to the final norm, and of the rest
  // (output projection + loss and, when training, the whole backward) — for profiling.
  double forward_seconds = 0.0;
  double rest_seconds = 0.0;
  double Mean() const { return num_valid > 0 ? loss_sum / num_valid : 0.0; }
};

// The rows per chunk of the fused output projection + cross-entropy for `rows` rows of a
// `vocab_size` vocabulary under `options` (see num_output_chunks and logits_chunk_rows);
// at least 1, at most max(rows, 1).
int64_t OutputChunkRows(const DecoderTrainerOptions& options, int64_t rows, int64_t vocab_size);

// The number of labels that are not ignore_index (-100). labels: i32/i64, any shape.
absl::StatusOr<int64_t> CountValidLabels(const Tensor& labels);

class DecoderTrainer {
 public:
  // `model` (parameters materialised, in any float dtype) and `grads` (an f32 arena with the
  // model's layout, e.g. ParameterArena::Allocate(layout.WithDType(kF32), device)) must
  // outlive the trainer. InvalidArgument when a parameter has no f32 gradient of its shape
  // (unless options.frozen_if_missing, for a missing one); Unimplemented for q/k norms.
  static absl::StatusOr<std::unique_ptr<DecoderTrainer>> Create(
      TransformerDecoder* model, const ParameterArena* grads, DecoderTrainerOptions options = {});
  // The same with the gradients as named f32 tensors, which may share storage
  // (optimizer_in_bwd: every layer's gradients are views of one layer-sized buffer).
  static absl::StatusOr<std::unique_ptr<DecoderTrainer>> Create(
      TransformerDecoder* model, const std::vector<std::pair<std::string, Tensor>>& grads,
      DecoderTrainerOptions options = {});

  // Where ForwardBackward's parameter gradients are complete, it calls `hook` with the stage:
  // num_layers() + 1 after the output projection's chunks, num_layers() after the final
  // norm, i after layer i, -1 after the embedding table (TransformerDecoder::Backward). An
  // error ends the call. Null (the default): none.
  using GradientReadyHook = std::function<absl::Status(int stage)>;
  void set_gradient_ready_hook(GradientReadyHook hook) { grad_ready_ = std::move(hook); }

  const DecoderTrainerOptions& options() const { return options_; }
  // The generator LoRA dropout draws its masks from (see above); it must outlive the trainer.
  // Until one is set, the trainer uses its own, seeded with 0. Advanced only by
  // ForwardBackward calls on a model with an adapter whose dropout is > 0.
  void set_generator(Generator* gen) { generator_ = gen != nullptr ? gen : &own_generator_; }
  Generator& generator() const { return *generator_; }
  void set_activation_checkpointing(bool on) { options_.activation_checkpointing = on; }
  // Sets options().num_output_chunks (e.g. from the config's loss component), clearing
  // logits_chunk_rows when n > 0. InvalidArgument for n < 0.
  absl::Status SetNumOutputChunks(int64_t n);
  // The chunks the last ForwardBackward / Loss call cut the output projection into (0 before
  // any call); its logits buffer held OutputChunkRows(...) x v floats.
  int64_t last_num_output_chunks() const { return last_num_output_chunks_; }

  // Forward, loss and backward. tokens: i32/i64 [b, s]; labels: i32/i64 [b, s] (each in
  // [0, v) or -100); mask: optional bool [b, s, s] (true = may attend; without it the
  // attention is causal); input_pos: optional i32/i64 [b, s] or [s] RoPE positions.
  // The gradient added to `grads` is that of loss_sum / normalizer; normalizer <= 0 means this
  // batch's num_valid (the mean loss). A batch with no valid label adds nothing.
  absl::StatusOr<LossSum> ForwardBackward(const Tensor& tokens, const Tensor& labels,
                                          const Tensor* mask = nullptr,
                                          const Tensor* input_pos = nullptr,
                                          double normalizer = 0.0);

  // The loss only (validation, finite differences); touches no gradient.
  absl::StatusOr<LossSum> Loss(const Tensor& tokens, const Tensor& labels,
                               const Tensor* mask = nullptr, const Tensor* input_pos = nullptr);

  ~DecoderTrainer();

 private:
  struct Batch;
  struct Workspace;
  DecoderTrainer(TransformerDecoder* model, DecoderTrainerOptions options);

  absl::StatusOr<Batch> PrepareBatch(const Tensor& tokens, const Tensor& labels,
                                     const Tensor* mask, const Tensor* input_pos) const;
  // Draws this step's dropout blocks from the generator (see above) for `rows` input rows.
  void AssignDropoutOffsets(int64_t rows);
  absl::StatusOr<LossSum> Run(const Tensor& tokens, const Tensor& labels, const Tensor* mask,
                              const Tensor* input_pos, bool backward, double normalizer);

  TransformerDecoder* model_;
  DecoderTrainerOptions options_;
  // Gradient views, this step's dropout masks and the backward's temporaries.
  ActivationStore store_;
  // LoRA dropout: the adapters with dropout > 0 in their draw order, and the generator.
  std::vector<const LoRALinear*> dropout_adapters_;
  Generator own_generator_{0};
  Generator* generator_ = &own_generator_;
  int64_t last_num_output_chunks_ = 0;
  GradientReadyHook grad_ready_;
  // The activations and loss buffers of the last call, reused by the next one (fresh
  // allocations of this size cost page faults on every step).
  std::unique_ptr<Workspace> ws_;
};

}  // namespace cctune

#endif  // CCTUNE_TRAINING_DECODER_TRAINER_H_
