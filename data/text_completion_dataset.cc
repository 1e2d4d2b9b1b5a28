#include "data/text_completion_dataset.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "data/json_records.h"
#include "data/parquet_records.h"

namespace cctune {

absl::StatusOr<Dataset> LoadTextCompletionDataset(const Tokenizer& tokenizer,
                                                  const TextCompletionDatasetOptions& options) {
  if (options.max_seq_len < 0) {
    return absl::InvalidArgumentError(absl::StrCat("dataset '", options.source, "': max_seq_len (",
                                                   options.max_seq_len, ") must be >= 0"));
  }
  std::vector<Sample> samples;
  for (const std::string& file :
       options.files.empty() ? std::vector<std::string>{options.source} : options.files) {
    CCTUNE_ASSIGN_OR_RETURN(const JsonRecords records, ReadRecordsFile(file));
    const int64_t n = static_cast<int64_t>(records.records.size());
    const size_t first = samples.size();
    samples.resize(first + n);
    std::vector<absl::Status> errors(n);
#pragma omp parallel for schedule(dynamic, 64) if (n > 256)
    for (int64_t i = 0; i < n; ++i) {
      absl::StatusOr<std::string> text = GetStringColumn(records, i, options.column);
      if (!text.ok()) {
        errors[i] = text.status();
        continue;
      }
      Sample& s = samples[first + i];
      s.tokens = tokenizer.Encode(*text, /*add_bos=*/true, options.add_eos);
      if (options.max_seq_len > 0 &&
          static_cast<int64_t>(s.tokens.size()) > options.max_seq_len) {
        s.tokens.resize(options.max_seq_len);
      }
      s.labels = s.tokens;
    }
    for (const absl::Status& e : errors) CCTUNE_RETURN_IF_ERROR(e);
  }
  return Dataset(std::move(samples), /*packed=*/false, options.source);
}

}  // namespace cctune
