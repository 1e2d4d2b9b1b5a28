#include "recipes/training_components.h"

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/random.h"
#include "core/status.h"
#include "data/dataset.h"
#include "data/dataset_components.h"
#include "recipes/config_checks.h"
#include "recipes/tokenizer_components.h"

namespace cctune {
namespace {

absl::Status NonNegativeNumber(const ConfigNode& node) {
  if ((node.kind() == ConfigNode::Kind::kInt || node.kind() == ConfigNode::Kind::kFloat) &&
      !(node.float_value() >= 0.0)) {
    return absl::InvalidArgumentError(absl::StrCat("must be >= 0, got ", node.text()));
  }
  return absl::OkStatus();
}

absl::Status PositiveInt(const ConfigNode& node) {
  if (node.kind() == ConfigNode::Kind::kInt && node.int_value() < 1) {
    return absl::InvalidArgumentError(absl::StrCat("must be >= 1, got ", node.int_value()));
  }
  return absl::OkStatus();
}

ConfigNode FloatList(std::vector<double> values) {
  std::vector<ConfigNode> items;
  for (double v : values) items.push_back(ConfigNode::Float(v));
  return ConfigNode::List(std::move(items));
}

absl::StatusOr<std::unique_ptr<Optimizer>> MakeAdamW(const ConfigNode& node,
                                                     const std::vector<ParamBuffer>& buffers) {
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
  CCTUNE_ASSIGN_OR_RETURN(std::unique_ptr<AdamW> opt, AdamW::Create(buffers, o));
  return std::unique_ptr<Optimizer>(std::move(opt));
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

absl::StatusOr<std::shared_ptr<const Dataset>> MakeSyntheticArithmetic(
    const ConfigNode& node, const DatasetContext& ctx) {
  if (ctx.tokenizer == nullptr) {
    return absl::InvalidArgumentError("synthetic_arithmetic needs a tokenizer");
  }
  CCTUNE_ASSIGN_OR_RETURN(int64_t num_samples, node.GetInt("num_samples"));
  CCTUNE_ASSIGN_OR_RETURN(int64_t seed, node.GetInt("seed"));
  CCTUNE_ASSIGN_OR_RETURN(int64_t max_digits, node.GetInt("max_digits"));
  CCTUNE_ASSIGN_OR_RETURN(bool train_on_input, node.GetBool("train_on_input"));
  CCTUNE_ASSIGN_OR_RETURN(int64_t first_index, node.GetInt("first_index"));
  if (max_digits < 1 || max_digits > 9) {
    return absl::InvalidArgumentError(
        absl::StrCat("synthetic_arithmetic: max_digits must be in [1, 9], got ", max_digits));
  }
  std::vector<Sample> samples;
  samples.reserve(num_samples);
  for (int64_t i = 0; i < num_samples; ++i) {
    auto [prompt, answer] =
        SyntheticArithmeticText(static_cast<uint64_t>(seed), first_index + i, max_digits);
    Sample s;
    s.tokens = ctx.tokenizer->Encode(prompt, /*add_bos=*/true, /*add_eos=*/false);
    const size_t prompt_len = s.tokens.size();
    std::vector<int32_t> ans = ctx.tokenizer->Encode(answer, false, /*add_eos=*/true);
    s.tokens.insert(s.tokens.end(), ans.begin(), ans.end());
    if (ctx.max_seq_len > 0 && static_cast<int64_t>(s.tokens.size()) > ctx.max_seq_len) {
      s.tokens.resize(ctx.max_seq_len);
    }
    s.labels = s.tokens;
    if (!train_on_input) {
      for (size_t t = 0; t < prompt_len && t < s.labels.size(); ++t) s.labels[t] = kIgnoreIndex;
    }
    samples.push_back(std::move(s));
  }
  return std::shared_ptr<const Dataset>(std::make_shared<Dataset>(
      std::move(samples), false, absl::StrCat("synthetic_arithmetic(seed=", seed, ")")));
}

}  // namespace

std::pair<std::string, std::string> SyntheticArithmeticText(uint64_t seed, int64_t index,
                                                            int64_t max_digits) {
  Generator gen(seed);
  gen.SetState(seed, static_cast<uint64_t>(index) * 16);
  uint64_t bound = 1;
  for (int64_t d = 0; d < max_digits; ++d) bound *= 10;
  const uint64_t a = gen.UniformInt(bound);
  const uint64_t b = gen.UniformInt(bound);
  return {absl::StrCat(a, "+", b, "="), absl::StrCat(a + b)};
}

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

absl::Status RegisterTrainingComponents() {
  static const absl::Status status = [] {
    CCTUNE_RETURN_IF_ERROR(RegisterDatasets());
    CCTUNE_RETURN_IF_ERROR(RegisterTokenizers());
    OptimizerRegistryT& opt = OptimizerRegistry();
    CCTUNE_RETURN_IF_ERROR(opt.Register(
        "cctune.optim.AdamW",
        Schema("", "AdamW (decoupled weight decay), fused over the parameter arena")
            .Required("lr", KeyType::Float(), "learning rate")
            .Check("lr", NonNegativeNumber)
            .Default("betas", KeyType::List(KeyType::Float()), FloatList({0.9, 0.999}),
                     "[beta1, beta2]")
            .Default("eps", KeyType::Float(), ConfigNode::Float(1e-8), "denominator epsilon")
            .Default("weight_decay", KeyType::Float(), ConfigNode::Float(0.01),
                     "decoupled weight decay")
            .Default("fused", KeyType::Bool().OrNull(), ConfigNode::Null(),
                     "accepted for torchtune configs; always fused here"),
        MakeAdamW));
    CCTUNE_RETURN_IF_ERROR(opt.Register(
        "cctune.optim.SGD",
        Schema("", "SGD with momentum / nesterov / L2 weight decay")
            .Required("lr", KeyType::Float(), "learning rate")
            .Check("lr", NonNegativeNumber)
            .Default("momentum", KeyType::Float(), ConfigNode::Float(0), "momentum")
            .Default("dampening", KeyType::Float(), ConfigNode::Float(0), "dampening")
            .Default("weight_decay", KeyType::Float(), ConfigNode::Float(0), "L2 weight decay")
            .Default("nesterov", KeyType::Bool(), ConfigNode::Bool(false), "nesterov momentum"),
        MakeSgd));
    CCTUNE_RETURN_IF_ERROR(opt.AddAlias("torch.optim.AdamW", "cctune.optim.AdamW"));
    CCTUNE_RETURN_IF_ERROR(opt.AddAlias("torch.optim.SGD", "cctune.optim.SGD"));

    CCTUNE_RETURN_IF_ERROR(LrSchedulerRegistry().Register(
        "cctune.training.lr_schedulers.get_cosine_schedule_with_warmup",
        Schema("", "linear warmup then cosine decay (torchtune's)")
            .Default("num_warmup_steps", KeyType::Int().InRange(0, kMaxStepsKey),
                     ConfigNode::Int(0), "warmup steps")
            .Check("num_warmup_steps", NonNegativeNumber)
            .Default("num_cycles", KeyType::Float(), ConfigNode::Float(0.5), "cosine cycles"),
        [](const ConfigNode& node, int64_t total) -> absl::StatusOr<CosineScheduleWithWarmup> {
          CCTUNE_ASSIGN_OR_RETURN(int64_t warmup, node.GetInt("num_warmup_steps"));
          CCTUNE_ASSIGN_OR_RETURN(double cycles, node.GetFloat("num_cycles"));
          return CosineScheduleWithWarmup::Create(warmup, total, cycles);
        }));
    CCTUNE_RETURN_IF_ERROR(LrSchedulerRegistry().AddAlias(
        "torchtune.modules.get_cosine_schedule_with_warmup",
        "cctune.training.lr_schedulers.get_cosine_schedule_with_warmup"));

    for (const char* name : {"CEWithChunkedOutputLoss", "CrossEntropyLoss"}) {
      CCTUNE_RETURN_IF_ERROR(LossRegistry().Register(
          absl::StrCat("cctune.modules.loss.", name),
          Schema("", "cross-entropy over shifted labels, ignore_index -100, computed in chunks")
              .Default("num_output_chunks", KeyType::Int(), ConfigNode::Int(0),
                       "accepted; chunking is by rows of logits (0: automatic)"),
          [name](const ConfigNode& node) -> absl::StatusOr<LossComponent> {
            LossComponent l;
            l.name = name;
            CCTUNE_ASSIGN_OR_RETURN(l.num_output_chunks, node.GetInt("num_output_chunks"));
            return l;
          }));
    }
    CCTUNE_RETURN_IF_ERROR(
        LossRegistry().AddAlias("torch.nn.CrossEntropyLoss", "cctune.modules.loss.CrossEntropyLoss"));

    CCTUNE_RETURN_IF_ERROR(DatasetRegistry().Register(
        "cctune.data.synthetic_arithmetic",
        Schema("", "\"a+b=c\" samples generated deterministically from a seed")
            .Default("num_samples", KeyType::Int().InRange(1, kMaxNumSamplesKey),
                     ConfigNode::Int(4096), "samples")
            .Check("num_samples", PositiveInt)
            .Default("seed", KeyType::Int(), ConfigNode::Int(0), "generator seed")
            .Default("first_index", KeyType::Int().InRange(0, int64_t{1} << 62), ConfigNode::Int(0),
                     "index of the first sample (a held-out split starts past the training one)")
            .Default("max_digits", KeyType::Int().InRange(1, 9), ConfigNode::Int(2),
                     "digits per operand")
            .Default("train_on_input", KeyType::Bool(), ConfigNode::Bool(false),
                     "also train on the prompt \"a+b=\"")
            .Default("packed", KeyType::Bool(), ConfigNode::Bool(false), "must be false")
            .Default("split", KeyType::String(), ConfigNode::String("train"), "ignored"),
        MakeSyntheticArithmetic));
    return absl::OkStatus();
  }();
  return status;
}

}  // namespace cctune
