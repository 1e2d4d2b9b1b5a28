#include "training/recipe_state.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/safetensors.h"
#include "core/status.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"

namespace cctune {
namespace {

// Collects the first text-format parse error with its position.
class FirstErrorCollector : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    if (error_.empty())
      error_ = absl::StrCat("line ", line + 1, " column ", column + 1, ": ", message);
  }
  void AddWarning(int, google::protobuf::io::ColumnNumber, const std::string&) override {}
  const std::string& error() const { return error_; }

 private:
  std::string error_;
};

absl::Status FieldError(const std::string& path, const std::string& field, int64_t value,
                        const std::string& requirement) {
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": field ", field, " (", value, ") ", requirement));
}

absl::Status CheckNonNegative(const std::string& path, const std::string& field, int64_t v) {
  if (v >= 0) return absl::OkStatus();
  return FieldError(path, field, v, "must be >= 0");
}

}  // namespace

std::string RecipeStateToText(const RecipeStateProto& proto) {
  google::protobuf::TextFormat::Printer printer;
  std::string text;
  printer.PrintToString(proto, &text);
  return text;
}

void SetOptimizerState(const OptimizerState& optimizer, RecipeState* state) {
  for (auto it = state->tensors.begin(); it != state->tensors.end();) {
    if (absl::StartsWith(it->first, kOptimizerTensorPrefix)) {
      it = state->tensors.erase(it);
    } else {
      ++it;
    }
  }
  OptimizerStateProto* p = state->proto.mutable_optimizer();
  p->Clear();
  p->set_name(optimizer.name);
  p->set_step(optimizer.step);
  for (const auto& [key, value] : optimizer.hyperparameters) {
    (*p->mutable_hyperparameters())[key] = value;
  }
  for (const auto& [name, tensor] : optimizer.tensors) {
    const std::string stored = absl::StrCat(kOptimizerTensorPrefix, name);
    state->tensors[stored] = tensor;
    p->add_tensor_names(stored);
  }
}

absl::StatusOr<OptimizerState> GetOptimizerState(const RecipeState& state) {
  const OptimizerStateProto& p = state.proto.optimizer();
  if (p.name().empty()) {
    return absl::NotFoundError("recipe state has no optimizer state (optimizer.name is empty)");
  }
  OptimizerState o;
  o.name = p.name();
  o.step = p.step();
  for (const auto& [key, value] : p.hyperparameters()) o.hyperparameters[key] = value;
  for (const std::string& stored : p.tensor_names()) {
    if (!absl::StartsWith(stored, kOptimizerTensorPrefix)) {
      return absl::InvalidArgumentError(absl::StrCat("recipe state: optimizer tensor '", stored,
                                                     "' lacks the '", kOptimizerTensorPrefix,
                                                     "' prefix"));
    }
    CCTUNE_ASSIGN_OR_RETURN(Tensor t, GetTensor(state.tensors, stored, "recipe state"));
    o.tensors[stored.substr(sizeof(kOptimizerTensorPrefix) - 1)] = t;
  }
  return o;
}

DataLoaderPositionProto DataLoaderPositionToProto(const DataLoader& loader) {
  DataLoaderPositionProto p;
  p.set_epoch(loader.position().epoch);
  p.set_batch_index(loader.position().batch_index);
  p.set_shuffle(loader.options().shuffle);
  p.set_shuffle_seed(loader.options().seed);
  p.set_dataset_size(loader.dataset().size());
  p.set_batch_size(loader.options().batch_size);
  p.set_drop_last(loader.options().drop_last);
  p.set_num_replicas(loader.options().num_replicas);
  return p;
}

absl::Status RestoreDataLoaderPosition(const DataLoaderPositionProto& saved,
                                       const std::string& source, DataLoader* loader) {
  const DataLoaderPositionProto now = DataLoaderPositionToProto(*loader);
  auto mismatch = [&](const char* field, auto saved_value, auto current_value) {
    return absl::FailedPreconditionError(
        absl::StrCat(source, ": field data.", field, " (", saved_value,
                     ") differs from this run's data loader (", current_value,
                     "); the saved position would not select the same batches"));
  };
  if (saved.shuffle() != now.shuffle()) return mismatch("shuffle", saved.shuffle(), now.shuffle());
  if (saved.shuffle() && saved.shuffle_seed() != now.shuffle_seed()) {
    return mismatch("shuffle_seed", saved.shuffle_seed(), now.shuffle_seed());
  }
  if (saved.dataset_size() != now.dataset_size()) {
    return mismatch("dataset_size", saved.dataset_size(), now.dataset_size());
  }
  const int64_t saved_ranks = std::max<int64_t>(saved.num_replicas(), 1);
  if (saved_ranks == now.num_replicas() && saved.batch_size() != now.batch_size()) {
    return mismatch("batch_size", saved.batch_size(), now.batch_size());
  }
  if (saved.batch_size() * saved_ranks != now.batch_size() * now.num_replicas()) {
    return mismatch("batch_size x num_replicas (the global batch)",
                    absl::StrCat(saved.batch_size(), " x ", saved_ranks),
                    absl::StrCat(now.batch_size(), " x ", now.num_replicas()));
  }
  if (saved.drop_last() != now.drop_last()) {
    return mismatch("drop_last", saved.drop_last(), now.drop_last());
  }
  absl::Status s = loader->SetPosition({saved.epoch(), saved.batch_index()});
  if (!s.ok()) return absl::Status(s.code(), absl::StrCat(source, ": field data: ", s.message()));
  return absl::OkStatus();
}

RngStateProto RngStateToProto(const Generator& gen) {
  RngStateProto p;
  p.set_seed(gen.seed());
  p.set_offset(gen.offset());
  return p;
}

void RestoreRngState(const RngStateProto& saved, Generator* gen) {
  gen->SetState(saved.seed(), saved.offset());
}

absl::Status SaveRecipeState(const std::string& path, const RecipeState& state) {
  RecipeStateProto proto = state.proto;
  proto.set_format_version(kRecipeStateFormatVersion);
  proto.clear_tensor_names();
  for (const auto& [name, tensor] : state.tensors) proto.add_tensor_names(name);
  const std::set<std::string> names(proto.tensor_names().begin(), proto.tensor_names().end());
  for (const std::string& n : proto.optimizer().tensor_names()) {
    if (names.count(n) == 0) {
      return absl::InvalidArgumentError(absl::StrCat("saving recipe state '", path,
                                                     "': optimizer.tensor_names names '", n,
                                                     "', which is not among the tensors"));
    }
  }
  return SaveSafetensors(path, state.tensors,
                         {{kRecipeStateMetadataKey, RecipeStateToText(proto)}});
}

absl::StatusOr<RecipeState> LoadRecipeState(const std::string& path) {
  CCTUNE_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::Open(path));
  auto meta = file.metadata().find(kRecipeStateMetadataKey);
  if (meta == file.metadata().end()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a cctune recipe state: the safetensors metadata has no '",
                     kRecipeStateMetadataKey, "' entry"));
  }
  RecipeState state;
  google::protobuf::TextFormat::Parser parser;
  FirstErrorCollector errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(meta->second, &state.proto)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": metadata '", kRecipeStateMetadataKey,
                     "' is not a valid RecipeStateProto: ", errors.error()));
  }
  const RecipeStateProto& p = state.proto;
  if (p.format_version() != kRecipeStateFormatVersion) {
    return FieldError(path, "format_version", p.format_version(),
                      absl::StrCat("is not supported (expected ", kRecipeStateFormatVersion, ")"));
  }
  CCTUNE_RETURN_IF_ERROR(CheckNonNegative(path, "step", p.step()));
  CCTUNE_RETURN_IF_ERROR(CheckNonNegative(path, "epoch", p.epoch()));
  CCTUNE_RETURN_IF_ERROR(CheckNonNegative(path, "tokens_seen", p.tokens_seen()));
  CCTUNE_RETURN_IF_ERROR(CheckNonNegative(path, "data.epoch", p.data().epoch()));
  CCTUNE_RETURN_IF_ERROR(CheckNonNegative(path, "data.batch_index", p.data().batch_index()));
  CCTUNE_RETURN_IF_ERROR(CheckNonNegative(path, "data.dataset_size", p.data().dataset_size()));
  CCTUNE_RETURN_IF_ERROR(CheckNonNegative(path, "data.batch_size", p.data().batch_size()));
  CCTUNE_RETURN_IF_ERROR(CheckNonNegative(path, "optimizer.step", p.optimizer().step()));

  std::set<std::string> listed;
  for (const std::string& n : p.tensor_names()) {
    if (!listed.insert(n).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": field tensor_names lists '", n, "' twice"));
    }
  }
  for (const std::string& n : file.Names()) {
    if (listed.count(n) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": field tensor_names does not list the file's tensor '", n, "'"));
    }
  }
  for (const std::string& n : p.tensor_names()) {
    if (!file.Contains(n)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": field tensor_names lists '", n,
                                                     "', which the file does not contain"));
    }
  }
  for (const std::string& n : p.optimizer().tensor_names()) {
    if (listed.count(n) == 0) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": field optimizer.tensor_names lists '",
                                                     n, "', which is not in tensor_names"));
    }
  }
  for (const auto& [key, value] : p.optimizer().hyperparameters()) {
    if (!std::isfinite(value)) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": field optimizer.hyperparameters[\"",
                                                     key, "\"] (", value, ") is not finite"));
    }
  }
  CCTUNE_ASSIGN_OR_RETURN(state.tensors, file.LoadAll());
  return state;
}

}  // namespace cctune
