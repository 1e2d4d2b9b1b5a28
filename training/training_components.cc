#include "training/training_components.h"

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "config/key_limits.h"
#include "config/value_checks.h"
#include "core/status.h"
#include "kernels/op_types.h"
#include "training/adamw8bit.h"

namespace cctune {
namespace {

ConfigNode FloatList(std::vector<double> values) {
  std::vector<ConfigNode> items;
  for (double v : values) items.push_back(ConfigNode::Float(v));
  return ConfigNode::List(std::move(items));
}

// betas, eps and weight_decay (torch's defaults; bitsandbytes' are the same).
Schema& AddAdamWKeys(Schema& schema) {
  return schema
      .Default("betas", KeyType::List(KeyType::Float()), FloatList({0.9, 0.999}),
               "[beta1, beta2]")
      .Default("eps", KeyType::Float(), ConfigNode::Float(1e-8), "denominator epsilon")
      .Default("weight_decay", KeyType::Float(), ConfigNode::Float(0.01),
               "decoupled weight decay");
}

// lr, betas, eps and weight_decay of an AdamW-style optimizer node.
absl::StatusOr<AdamWOptions> ReadAdamWOptions(const ConfigNode& node) {
  AdamWOptions o;
  CCTUNE_ASSIGN_OR_RETURN(o.lr, node.GetFloat("lr"));
  CCTUNE_ASSIGN_OR_RETURN(std::vector<double> betas, node.GetList<double>("betas"));
  if (betas.size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("betas: expected [beta1, beta2], got ", betas.size(), " values"));
  }
  o.beta1 = betas[0];
  o.beta2 = betas[1];
  CCTUNE_ASSIGN_OR_RETURN(o.eps, node.GetFloat("eps"));
  CCTUNE_ASSIGN_OR_RETURN(o.weight_decay, node.GetFloat("weight_decay"));
  return o;
}

absl::StatusOr<std::unique_ptr<Optimizer>> MakeAdamW(const ConfigNode& node,
                                                     const std::vector<ParamBuffer>& buffers) {
  CCTUNE_ASSIGN_OR_RETURN(std::optional<bool> fused, node.GetOptionalBool("fused"));
  if (!fused.value_or(true)) {
    return absl::UnimplementedError(
        "optimizer.fused: false is not supported; AdamW here is always one fused pass over "
        "the parameter arena (use true or null)");
  }
  CCTUNE_ASSIGN_OR_RETURN(const AdamWOptions o, ReadAdamWOptions(node));
  CCTUNE_ASSIGN_OR_RETURN(std::unique_ptr<AdamW> opt, AdamW::Create(buffers, o));
  return std::unique_ptr<Optimizer>(std::move(opt));
}

// bitsandbytes' AdamW family (bitsandbytes.optim.AdamW / PagedAdamW / AdamW8bit /
// PagedAdamW8bit): AdamW (32-bit state) or AdamW8bit (block-wise 8-bit state). "Paged" puts
// bitsandbytes' state in CUDA unified memory; here the state is the same either way (host
// memory on CPU; on CUDA, device memory without paging, 32-bit only).
absl::StatusOr<std::unique_ptr<Optimizer>> MakeBnbAdamW(const ConfigNode& node,
                                                        const std::vector<ParamBuffer>& buffers,
                                                        bool eight_bit_class) {
  AdamW8bitOptions o;
  CCTUNE_ASSIGN_OR_RETURN(o.adamw, ReadAdamWOptions(node));
  CCTUNE_ASSIGN_OR_RETURN(o.min_8bit_size, node.GetInt("min_8bit_size"));
  CCTUNE_ASSIGN_OR_RETURN(bool amsgrad, node.GetBool("amsgrad"));
  if (amsgrad) {
    return absl::UnimplementedError("optimizer.amsgrad: true is not supported (AdamW only)");
  }
  CCTUNE_ASSIGN_OR_RETURN(double percentile, node.GetFloat("percentile_clipping"));
  if (percentile != 100) {
    return absl::UnimplementedError(absl::StrCat(
        "optimizer.percentile_clipping: ", percentile,
        " is not supported (only 100, no clipping; use the recipe's clip_grad_norm)"));
  }
  CCTUNE_ASSIGN_OR_RETURN(bool block_wise, node.GetBool("block_wise"));
  if (!block_wise) {
    return absl::UnimplementedError(
        "optimizer.block_wise: false is not supported (the 8-bit state is always block-wise)");
  }
  bool eight_bit = eight_bit_class;
  if (!eight_bit_class) {
    CCTUNE_ASSIGN_OR_RETURN(int64_t bits, node.GetInt("optim_bits"));
    if (bits != 32 && bits != 8) {
      return absl::InvalidArgumentError(
          absl::StrCat("optimizer.optim_bits: ", bits, " (expected 32 or 8)"));
    }
    eight_bit = bits == 8;
  }
  if (eight_bit) {
    CCTUNE_ASSIGN_OR_RETURN(std::unique_ptr<AdamW8bit> opt, AdamW8bit::Create(buffers, o));
    return std::unique_ptr<Optimizer>(std::move(opt));
  }
  CCTUNE_ASSIGN_OR_RETURN(std::unique_ptr<AdamW> opt, AdamW::Create(buffers, o.adamw));
  return std::unique_ptr<Optimizer>(std::move(opt));
}

Schema BnbAdamWSchema(bool eight_bit_class) {
  Schema schema(
      "", eight_bit_class
              ? "bitsandbytes' AdamW8bit: AdamW with block-wise 8-bit moments (256 per block, "
                "dynamic quantization map; about 2 bytes of state per parameter), CPU"
              : "bitsandbytes' AdamW: AdamW (optim_bits 32) or AdamW8bit (optim_bits 8)");
  schema.Default("lr", KeyType::Float(), ConfigNode::Float(1e-3), "learning rate")
      .Check("lr", NonNegative);
  AddAdamWKeys(schema)
      .Default("amsgrad", KeyType::Bool(), ConfigNode::Bool(false), "only false")
      .Default("min_8bit_size", KeyType::Int().InRange(0, 1e15), ConfigNode::Int(4096),
               "buffers with fewer elements keep f32 moments")
      .Default("percentile_clipping", KeyType::Float(), ConfigNode::Float(100), "only 100")
      .Default("block_wise", KeyType::Bool(), ConfigNode::Bool(true), "only true")
      .Default("is_paged", KeyType::Bool(), ConfigNode::Bool(false),
               "accepted; the state is not paged (host memory on CPU)");
  if (!eight_bit_class) {
    schema.Default("optim_bits", KeyType::Int(), ConfigNode::Int(32), "32 or 8");
  }
  return schema;
}

absl::StatusOr<std::unique_ptr<Optimizer>> MakeSgd(const ConfigNode& node,
                                                   const std::vector<ParamBuffer>& buffers) {
  SgdOptions o;
  CCTUNE_ASSIGN_OR_RETURN(o.lr, node.GetFloat("lr"));
  CCTUNE_ASSIGN_OR_RETURN(o.momentum, node.GetFloat("momentum"));
  CCTUNE_ASSIGN_OR_RETURN(o.dampening, node.GetFloat("dampening"));
  CCTUNE_ASSIGN_OR_RETURN(o.weight_decay, node.GetFloat("weight_decay"));
  CCTUNE_ASSIGN_OR_RETURN(o.nesterov, node.GetBool("nesterov"));
  CCTUNE_ASSIGN_OR_RETURN(std::unique_ptr<Sgd> opt, Sgd::Create(buffers, o));
  return std::unique_ptr<Optimizer>(std::move(opt));
}

}  // namespace

OptimizerRegistryT& OptimizerRegistry() {
  static OptimizerRegistryT* const r = new OptimizerRegistryT("optimizer");
  return *r;
}

LrSchedulerRegistryT& LrSchedulerRegistry() {
  static LrSchedulerRegistryT* const r = new LrSchedulerRegistryT("lr_scheduler");
  return *r;
}

LossRegistryT& LossRegistry() {
  static LossRegistryT* const r = new LossRegistryT("loss");
  return *r;
}

absl::Status ApplyLossComponent(const ConfigNode& root, DecoderTrainer* trainer) {
  const ConfigNode* node = root.Find("loss");
  if (node == nullptr || node->IsNull()) return absl::OkStatus();
  CCTUNE_ASSIGN_OR_RETURN(LossComponent loss, LossRegistry().Instantiate(*node));
  return trainer->SetNumOutputChunks(loss.num_output_chunks);
}

absl::Status RegisterTrainingComponents() {
  static const absl::Status status = [] {
    OptimizerRegistryT& opt = OptimizerRegistry();
    CCTUNE_RETURN_IF_ERROR(opt.Register(
        "cctune.optim.AdamW",
        AddAdamWKeys(Schema("", "AdamW (decoupled weight decay), fused over the parameter arena")
                         .Required("lr", KeyType::Float(), "learning rate")
                         .Check("lr", NonNegative))
            .Default("fused", KeyType::Bool().OrNull(), ConfigNode::Null(),
                     "null or true: the update is always one fused pass over the arena"),
        MakeAdamW));
    CCTUNE_RETURN_IF_ERROR(opt.Register(
        "cctune.optim.SGD",
        Schema("", "SGD with momentum / nesterov / L2 weight decay")
            .Required("lr", KeyType::Float(), "learning rate")
            .Check("lr", NonNegative)
            .Default("momentum", KeyType::Float(), ConfigNode::Float(0), "momentum")
            .Default("dampening", KeyType::Float(), ConfigNode::Float(0), "dampening")
            .Default("weight_decay", KeyType::Float(), ConfigNode::Float(0), "L2 weight decay")
            .Default("nesterov", KeyType::Bool(), ConfigNode::Bool(false), "nesterov momentum"),
        MakeSgd));
    for (const bool eight_bit : {false, true}) {
      const std::string name = eight_bit ? "AdamW8bit" : "AdamW";
      CCTUNE_RETURN_IF_ERROR(opt.Register(
          absl::StrCat("bitsandbytes.optim.", name), BnbAdamWSchema(eight_bit),
          [eight_bit](const ConfigNode& node, const std::vector<ParamBuffer>& buffers) {
            return MakeBnbAdamW(node, buffers, eight_bit);
          }));
      CCTUNE_RETURN_IF_ERROR(opt.AddAlias(absl::StrCat("bitsandbytes.optim.Paged", name),
                                          absl::StrCat("bitsandbytes.optim.", name)));
    }
    CCTUNE_RETURN_IF_ERROR(opt.AddAlias("torch.optim.AdamW", "cctune.optim.AdamW"));
    CCTUNE_RETURN_IF_ERROR(opt.AddAlias("torch.optim.SGD", "cctune.optim.SGD"));

    CCTUNE_RETURN_IF_ERROR(LrSchedulerRegistry().Register(
        "cctune.training.lr_schedulers.get_cosine_schedule_with_warmup",
        Schema("", "linear warmup then cosine decay (torchtune's)")
            .Default("num_warmup_steps", KeyType::Int().InRange(0, kMaxStepsKey),
                     ConfigNode::Int(0), "warmup steps")
            .Check("num_warmup_steps", NonNegative)
            .Default("num_cycles", KeyType::Float(), ConfigNode::Float(0.5), "cosine cycles"),
        [](const ConfigNode& node, int64_t total) -> absl::StatusOr<CosineScheduleWithWarmup> {
          CCTUNE_ASSIGN_OR_RETURN(int64_t warmup, node.GetInt("num_warmup_steps"));
          CCTUNE_ASSIGN_OR_RETURN(double cycles, node.GetFloat("num_cycles"));
          return CosineScheduleWithWarmup::Create(warmup, total, cycles);
        }));
    CCTUNE_RETURN_IF_ERROR(LrSchedulerRegistry().AddAlias(
        "torchtune.modules.get_cosine_schedule_with_warmup",
        "cctune.training.lr_schedulers.get_cosine_schedule_with_warmup"));

    // torchtune's LinearCrossEntropyLoss (its newer configs) owns the output projection and
    // chunks it, as our fused loss does: the same component under its name.
    for (const char* name :
         {"CEWithChunkedOutputLoss", "LinearCrossEntropyLoss", "CrossEntropyLoss"}) {
      CCTUNE_RETURN_IF_ERROR(LossRegistry().Register(
          absl::StrCat("cctune.modules.loss.", name),
          Schema("", "cross-entropy over shifted labels, fused with the output projection and "
                     "computed in row chunks (DecoderTrainer)")
              .Default("num_output_chunks", KeyType::Int().InRange(0, kMaxSeqLenKey),
                       ConfigNode::Int(0),
                       "chunks of the b*s rows, split as torch.chunk does (0: about 16M logits "
                       "per chunk)")
              .Default("ignore_index", KeyType::Int(), ConfigNode::Int(ops::kIgnoreIndex),
                       "label ignored by the loss; only -100"),
          [name](const ConfigNode& node) -> absl::StatusOr<LossComponent> {
            CCTUNE_ASSIGN_OR_RETURN(int64_t ignore_index, node.GetInt("ignore_index"));
            if (ignore_index != ops::kIgnoreIndex) {
              return absl::UnimplementedError(absl::StrCat(
                  "ignore_index ", ignore_index, " is not supported; the datasets and the "
                  "trainer mask labels with -100"));
            }
            LossComponent l;
            l.name = name;
            CCTUNE_ASSIGN_OR_RETURN(l.num_output_chunks, node.GetInt("num_output_chunks"));
            return l;
          }));
    }
    CCTUNE_RETURN_IF_ERROR(
        LossRegistry().AddAlias("torch.nn.CrossEntropyLoss", "cctune.modules.loss.CrossEntropyLoss"));

    return absl::OkStatus();
  }();
  return status;
}

}  // namespace cctune
