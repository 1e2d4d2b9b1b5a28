#include "recipes/finetune_utils.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status.h"
#include "data/dataset_components.h"

namespace cctune {


// config.json fields of `model`; tied when the arena has no output.weight.
HfModelConfig ModelHfConfig(const TransformerDecoder& model, const ParameterArena& arena,
                            DType dtype) {
  HfModelConfig c;
  const auto& attn = model.layer(0).attn();
  c.vocab_size = model.vocab_size();
  c.hidden_size = model.embed_dim();
  c.intermediate_size = model.layer(0).mlp().hidden_dim();
  c.num_hidden_layers = static_cast<int64_t>(model.num_layers());
  c.num_attention_heads = attn.num_heads();
  c.num_key_value_heads = attn.num_kv_heads();
  c.head_dim = attn.head_dim();
  c.max_position_embeddings = model.max_seq_len();
  // The f32 eps, written with the digits a float holds (1e-05, not 9.99999974e-06).
  c.rms_norm_eps = std::stod(absl::StrFormat("%.7g", model.norm().eps()));
  if (attn.pos_embeddings() != nullptr) c.rope_theta = attn.pos_embeddings()->base();
  c.tie_word_embeddings = arena.layout().Find("output.weight") == nullptr;
  c.qkv_bias = arena.layout().Find("layers.0.attn.q_proj.bias") != nullptr;
  c.o_bias = arena.layout().Find("layers.0.attn.output_proj.bias") != nullptr;
  // q/k/v biases without an output bias: Qwen2's layout, which HF's llama config cannot state
  // (one attention_bias flag for all four).
  if (c.qkv_bias && !c.o_bias) c.model_type = "qwen2";
  c.dtype = dtype == DType::kBF16 ? "bfloat16" : "float32";
  return c;
}

std::vector<ConfigError> MissingDatasetFiles(const ConfigNode& root, const char* key) {
  std::vector<ConfigError> errors;
  const ConfigNode* ds = root.Find(key);
  if (ds == nullptr || !ds->IsMap() || ds->Find("_component_") == nullptr) return errors;
  // Resolved as the builder will (hub cache, folder, file, 'json' + data_files), so that a
  // missing dataset is reported with every other config error, before anything is built.
  if (absl::Status s = ResolveDatasetFiles(*ds).status(); !s.ok()) {
    ConfigError e;
    e.location = ds->location();
    e.key = key;
    e.message = std::string(s.message());
    errors.push_back(std::move(e));
  }
  return errors;
}

absl::StatusOr<MicroBatch> ToMicroBatch(const Batch& batch) {
  MicroBatch mb;
  mb.tokens = batch.tokens;
  CCTUNE_ASSIGN_OR_RETURN(mb.labels, ShiftLabels(batch.labels));
  if (batch.packed) {
    CCTUNE_ASSIGN_OR_RETURN(mb.mask, BlockCausalMask(batch));
    mb.input_pos = batch.input_pos;
  }
  return mb;
}

absl::StatusOr<double> ValidationLoss(DecoderTrainer& trainer, DataLoader& loader) {
  double sum = 0;
  int64_t n = 0;
  CCTUNE_RETURN_IF_ERROR(loader.StartEpoch(0));
  while (!loader.EpochDone()) {
    CCTUNE_ASSIGN_OR_RETURN(Batch batch, loader.Next());
    CCTUNE_ASSIGN_OR_RETURN(MicroBatch mb, ToMicroBatch(batch));
    CCTUNE_ASSIGN_OR_RETURN(
        LossSum l, trainer.Loss(mb.tokens, mb.labels, mb.mask.defined() ? &mb.mask : nullptr,
                                mb.input_pos.defined() ? &mb.input_pos : nullptr));
    sum += l.loss_sum;
    n += l.num_valid;
  }
  return n > 0 ? sum / n : 0.0;
}

}  // namespace cctune
