// optimizer_in_bwd (torchtune's key): each parameter is updated as soon as its gradient is
// complete in the backward, so the full gradient arena never exists.
//
// The trainable parameters fall into the backward's stages (DecoderTrainer's gradient-ready
// hook): the untied output projection, the final norm, each layer from the last to the
// first, and the embedding table (which a tied output also writes to). Every layer's
// gradients are views of ONE layer-sized f32 buffer: at the end of layer i's backward its
// parameters are updated by their own optimizer and the buffer is zeroed for layer i - 1. The
// output, the final norm and the table have buffers of their own (the tied table collects
// gradient from the output chunks before the layers run). Gradient memory: one layer +
// output + norm + table, instead of every trainable parameter.
//
// One optimizer per stage, made by the `optimizer` component over that stage's parameters
// (one ParamBuffer per parameter, named like the parameter with '.' as '_'); the lr is set
// on all of them before each update. The update of a parameter is element-wise the same as
// the whole-arena optimizer's, so the result matches the ordinary path (tested bit for bit
// on CPU AdamW). The state is exported as one OptimizerState (the stages' tensors together),
// so the recipe state saves and resumes it as any optimizer's; it is not interchangeable with
// a whole-arena optimizer's state (other buffer names).
//
// What cannot work with updates during the backward, as torchtune: gradient clipping (the
// global norm is known only once every parameter has been updated) and gradient accumulation
// (each micro-batch's backward would update). TrainStep refuses both. The step's gradient
// norm is still computed, stage by stage, for the log; a non-finite stage gradient stops the
// step before that stage's update (earlier stages are already updated).
//
//   CCTUNE_ASSIGN_OR_RETURN(auto opt, OptimizerInBackward::Create(*model, params, trainable,
//                                                                 make_optimizer));
//   CCTUNE_ASSIGN_OR_RETURN(auto trainer, DecoderTrainer::Create(model, opt->gradients()));
//   opt->Attach(*trainer);
//   CCTUNE_ASSIGN_OR_RETURN(TrainStepResult r, TrainStep(*trainer, *opt, {batch}, 0.0));
#ifndef CCTUNE_TRAINING_OPTIMIZER_IN_BACKWARD_H_
#define CCTUNE_TRAINING_OPTIMIZER_IN_BACKWARD_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "modules/parameters.h"
#include "modules/transformer_decoder.h"
#include "training/decoder_trainer.h"
#include "training/optim.h"

namespace cctune {

class OptimizerInBackward final : public Optimizer {
 public:
  using Factory =
      std::function<absl::StatusOr<std::unique_ptr<Optimizer>>(const std::vector<ParamBuffer>&)>;

  // The trainable parameters are `trainable`'s entries (by name, in `params`, the model's
  // parameter arena); their gradients are allocated on params' device. InvalidArgument for a
  // parameter outside the decoder's stages (output., norm., layers.<i>., tok_embeddings.).
  static absl::StatusOr<std::unique_ptr<OptimizerInBackward>> Create(
      const TransformerDecoder& model, const ParameterArena& params,
      const ParameterLayout& trainable, const Factory& make_optimizer);

  const char* name() const override { return name_.c_str(); }
  bool UpdatesInBackward() const override { return true; }
  // Counts the step whose updates the backward made; FailedPrecondition unless every stage
  // with parameters was updated once since ZeroGrad.
  absl::Status Step() override;
  // Zeroes every gradient buffer and starts a step (norm, stages updated).
  absl::Status ZeroGrad() override;
  OptimizerState ExportState() const override;
  absl::Status ImportState(const OptimizerState& state) override;
  // The stages' optimizers' state.
  int64_t StateBytes() const override;

  // The trainer's gradients, by parameter name (the layers' share storage).
  const std::vector<std::pair<std::string, Tensor>>& gradients() const { return gradients_; }
  // Bytes of the gradient buffers (what the whole-arena path would hold: trainable.Bytes()).
  int64_t GradientBytes() const;
  // Makes `trainer` call OnGradientsReady at each stage.
  void Attach(DecoderTrainer& trainer);
  // Updates the parameters of `stage` (DecoderTrainer::GradientReadyHook's numbering) with the
  // current lr and zeroes their gradients.
  absl::Status OnGradientsReady(int stage);
  // sqrt of the summed squares of the gradients updated since ZeroGrad.
  double grad_norm() const;

 private:
  struct Stage {
    int stage = 0;
    std::unique_ptr<Optimizer> optimizer;  // over the stage's parameters
    bool updated = false;
  };
  OptimizerInBackward(std::vector<ParamBuffer> all, std::vector<Stage> stages,
                      std::vector<std::pair<std::string, Tensor>> gradients,
                      std::vector<Tensor> storage, int num_layers);

  std::string name_;
  std::vector<Stage> stages_;
  std::vector<int> stage_index_;  // by stage + 1: index into stages_, or -1
  std::vector<std::pair<std::string, Tensor>> gradients_;
  std::vector<Tensor> storage_;  // the gradient buffers
  double squared_norm_ = 0;
};

}  // namespace cctune

#endif  // CCTUNE_TRAINING_OPTIMIZER_IN_BACKWARD_H_
