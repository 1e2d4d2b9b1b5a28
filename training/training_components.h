// Optimizers, LR schedulers and losses as config components, with torchtune's spellings:
//   optimizer     cctune.optim.AdamW (torch.optim.AdamW): lr, betas [b1, b2], eps,
//                 weight_decay; cctune.optim.SGD (torch.optim.SGD): lr, momentum, dampening,
//                 weight_decay, nesterov; bitsandbytes.optim.AdamW8bit / PagedAdamW8bit
//                 (training/adamw8bit.h, CPU) and AdamW / PagedAdamW (optim_bits 32: AdamW,
//                 8: AdamW8bit), with bitsandbytes' keys and defaults; paged or not, the
//                 state is the same. Factories get the parameter/gradient buffers.
//   lr_scheduler  cctune.training.lr_schedulers.get_cosine_schedule_with_warmup
//                 (num_warmup_steps, num_cycles; the recipe supplies num_training_steps)
//   loss          cctune.modules.loss.CEWithChunkedOutputLoss and
//                 cctune.modules.loss.CrossEntropyLoss (torch.nn.CrossEntropyLoss): the fused
//                 chunked output projection + cross-entropy of DecoderTrainer;
//                 num_output_chunks sets its chunking (ApplyLossComponent), ignore_index
//                 must be -100
//   tokenizer     cctune.data.byte_tokenizer (tokenizers/byte_tokenizer.h; max_seq_len)
//   dataset       cctune.data.synthetic_arithmetic: "a+b=c" samples generated from a seed
//                 (see SyntheticArithmeticText), prompt "a+b=" masked out of the loss.
#ifndef CCTUNE_TRAINING_TRAINING_COMPONENTS_H_
#define CCTUNE_TRAINING_TRAINING_COMPONENTS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "config/registry.h"
#include "training/decoder_trainer.h"
#include "training/lr_scheduler.h"
#include "training/optim.h"

namespace cctune {

using OptimizerRegistryT =
    Registry<std::unique_ptr<Optimizer>, const std::vector<ParamBuffer>&>;
// Component kind "optimizer".
OptimizerRegistryT& OptimizerRegistry();

// Factories get num_training_steps (the recipe's total optimizer steps).
using LrSchedulerRegistryT = Registry<CosineScheduleWithWarmup, int64_t>;
// Component kind "lr_scheduler".
LrSchedulerRegistryT& LrSchedulerRegistry();

struct LossComponent {
  std::string name;
  int64_t num_output_chunks = 0;  // 0: DecoderTrainer's default chunking
};
using LossRegistryT = Registry<LossComponent>;
// Component kind "loss".
LossRegistryT& LossRegistry();

// Instantiates root's `loss` (absent or null: the trainer's defaults stay) and applies it:
// num_output_chunks -> trainer->SetNumOutputChunks. Errors name the key and value.
absl::Status ApplyLossComponent(const ConfigNode& root, DecoderTrainer* trainer);

// Registers the components above (idempotent, thread-safe).
absl::Status RegisterTrainingComponents();

}  // namespace cctune

#endif  // CCTUNE_TRAINING_TRAINING_COMPONENTS_H_
