#include "tokenizers/tokenizer.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace cctune {

absl::StatusOr<std::string> ReadTokenizerFile(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("cannot open tokenizer file ", path, ": ", std::strerror(errno)));
  }
  std::string contents;
  char buffer[1 << 16];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), f)) > 0) contents.append(buffer, n);
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) return absl::DataLossError(absl::StrCat("error reading tokenizer file ", path));
  return contents;
}

absl::Status CheckTokenId(int32_t id, int32_t vocab_size, std::string_view where) {
  if (id < 0 || id >= vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        absl::string_view(where.data(), where.size()), ": token id ", id, " is outside the vocabulary [0, ", vocab_size, ")"));
  }
  return absl::OkStatus();
}

}  // namespace cctune
