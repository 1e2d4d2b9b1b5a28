#include "data/sft_dataset.h"

#include <functional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "data/json_records.h"
#include "data/parquet_records.h"

namespace cctune {
namespace {

using ToMessages = std::function<absl::StatusOr<std::vector<Message>>(const JsonRecords&, size_t)>;

// Tokenizes every record of every file (in parallel: records are independent and tokenizers
// are const); the first failing record, in file order, is the error.
absl::StatusOr<Dataset> Build(const Tokenizer& tokenizer, PromptFormat format,
                              const std::string& source, const std::vector<std::string>& files,
                              int64_t max_seq_len, bool truncate_left,
                              const ToMessages& to_messages) {
  if (max_seq_len < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("dataset '", source, "': max_seq_len (", max_seq_len, ") must be >= 0"));
  }
  std::vector<Sample> samples;
  for (const std::string& file : files.empty() ? std::vector<std::string>{source} : files) {
    CCTUNE_ASSIGN_OR_RETURN(const JsonRecords records, ReadRecordsFile(file));
    const int64_t n = static_cast<int64_t>(records.records.size());
    const size_t first = samples.size();
    samples.resize(first + n);
    std::vector<absl::Status> errors(n);
#pragma omp parallel for schedule(dynamic, 64) if (n > 256)
    for (int64_t i = 0; i < n; ++i) {
      absl::StatusOr<std::vector<Message>> messages = to_messages(records, i);
      if (!messages.ok()) {
        errors[i] = messages.status();
        continue;
      }
      absl::StatusOr<Sample> s = SampleFromMessages(tokenizer, format, *messages, max_seq_len, truncate_left);
      if (!s.ok()) {
        errors[i] = absl::Status(s.status().code(),
                                 absl::StrCat(records.Where(i), ": ", s.status().message()));
        continue;
      }
      samples[first + i] = std::move(*s);
    }
    for (const absl::Status& e : errors) CCTUNE_RETURN_IF_ERROR(e);
  }
  return Dataset(std::move(samples), /*packed=*/false, source);
}

}  // namespace

absl::StatusOr<Dataset> LoadInstructDataset(const Tokenizer& tokenizer, PromptFormat format,
                                            const InstructDatasetOptions& options) {
  absl::Status valid = ValidateInstructOptions(options.messages);
  if (!valid.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("dataset '", options.source, "': ", valid.message()));
  }
  return Build(
      tokenizer, format, options.source, options.files, options.max_seq_len,
      options.truncate_left,
      [&](const JsonRecords& r, size_t i) { return InstructToMessages(r, i, options.messages); });
}

absl::StatusOr<Dataset> LoadChatDataset(const Tokenizer& tokenizer, PromptFormat format,
                                        const ChatDatasetOptions& options) {
  return Build(
      tokenizer, format, options.source, options.files, options.max_seq_len,
      options.truncate_left,
      [&](const JsonRecords& r, size_t i) { return ChatToMessages(r, i, options.messages); });
}

}  // namespace cctune
