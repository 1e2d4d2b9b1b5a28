#include "data/dataset.h"

#include <algorithm>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "core/status.h"

namespace cctune {

int64_t Dataset::NumTokens() const {
  int64_t n = 0;
  for (const Sample& s : samples_) n += static_cast<int64_t>(s.tokens.size()) - s.num_padding;
  return n;
}

int64_t Dataset::NumLabelTokens() const {
  int64_t n = 0;
  for (const Sample& s : samples_) {
    for (int32_t l : s.labels) n += l != kIgnoreIndex;
  }
  return n;
}

namespace {

// One bound of a split slice: "", "10", "-5", "90%". `n` is the dataset size.
absl::StatusOr<int64_t> SplitBound(absl::string_view text, int64_t n, int64_t if_empty,
                                   const std::string& split) {
  if (text.empty()) return if_empty;
  const bool percent = absl::ConsumeSuffix(&text, "%");
  int64_t v;
  if (!absl::SimpleAtoi(text, &v)) {
    return absl::InvalidArgumentError(
        absl::StrCat("split '", split, "': bad bound '", std::string(text), "'"));
  }
  if (percent) {
    if (v < -100 || v > 100) {
      return absl::InvalidArgumentError(
          absl::StrCat("split '", split, "': ", v, "% is outside [-100%, 100%]"));
    }
    v = n * v / 100;
  }
  if (v < 0) v += n;
  return std::clamp<int64_t>(v, 0, n);
}

}  // namespace

absl::StatusOr<std::string> SplitName(const std::string& split) {
  const std::string name = split.substr(0, split.find('['));
  if (name.find('+') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("split '", split, "': combining splits with '+' is not supported"));
  }
  bool ok = !name.empty();
  for (char c : name) ok = ok && (absl::ascii_isalnum(c) || c == '_' || c == '-' || c == '.');
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        "split '", split, "': expected a split name, optionally sliced: train, train[:90%]"));
  }
  return name;
}

absl::StatusOr<Dataset> SliceSplit(const Dataset& dataset, const std::string& split) {
  CCTUNE_ASSIGN_OR_RETURN(const std::string name, SplitName(split));
  absl::string_view s = split;
  s.remove_prefix(name.size());
  if (s.empty()) return dataset;
  if (!absl::ConsumePrefix(&s, "[") || !absl::ConsumeSuffix(&s, "]") ||
      s.find(':') == absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("split '", split, "': expected ", name, "[start:end]"));
  }
  const size_t colon = s.find(':');
  const int64_t n = dataset.size();
  CCTUNE_ASSIGN_OR_RETURN(const int64_t begin, SplitBound(s.substr(0, colon), n, 0, split));
  CCTUNE_ASSIGN_OR_RETURN(const int64_t end, SplitBound(s.substr(colon + 1), n, n, split));
  std::vector<Sample> samples;
  for (int64_t i = begin; i < end; ++i) samples.push_back(dataset[i]);
  return Dataset(std::move(samples), dataset.packed(),
                 absl::StrCat(dataset.source(), "[", begin, ":", end, "]"));
}

absl::StatusOr<Dataset> SelectSplit(const Dataset& dataset, const std::string& split) {
  CCTUNE_ASSIGN_OR_RETURN(const std::string name, SplitName(split));
  if (name != "train") {
    return absl::InvalidArgumentError(
        absl::StrCat("split '", split,
                     "': local files have one split, 'train' (optionally sliced, e.g. "
                     "train[:90%])"));
  }
  return SliceSplit(dataset, split);
}

absl::StatusOr<Sample> SampleFromMessages(const Tokenizer& tokenizer, PromptFormat format,
                                          absl::Span<const Message> messages, int64_t max_seq_len,
                                          bool truncate_left) {
  TokenizeMessagesOptions options;
  options.max_seq_len = max_seq_len;
  options.truncate_left = truncate_left;
  CCTUNE_ASSIGN_OR_RETURN(TokenizedMessages t,
                          TokenizeMessages(tokenizer, format, messages, options));
  Sample s;
  s.labels.resize(t.tokens.size());
  for (size_t i = 0; i < t.tokens.size(); ++i) {
    s.labels[i] = t.mask[i] ? kIgnoreIndex : t.tokens[i];
  }
  s.tokens = std::move(t.tokens);
  return s;
}

}  // namespace cctune
