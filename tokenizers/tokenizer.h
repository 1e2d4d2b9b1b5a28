// The tokenizer interface every model family implements (tiktoken for Llama 3, SentencePiece
// for Llama 2, llama2.c's .bin), plus the file reading they share. Ids are int32 everywhere.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tok, MakeLlama3Tokenizer(path));
//   std::vector<int32_t> ids = tok->Encode("Hello", /*add_bos=*/true, /*add_eos=*/false);
//   ASSIGN_OR_RETURN(std::string text, tok->Decode(ids));
#ifndef CCTUNE_TOKENIZERS_TOKENIZER_H_
#define CCTUNE_TOKENIZERS_TOKENIZER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace cctune {

struct EncodeOptions {
  bool add_bos = false;
  bool add_eos = false;
  // Tokenizers with special-token text (tiktoken): "<|eot_id|>" in the text becomes that one
  // id. Off by default, as in torchtune: user text never smuggles in control tokens.
  bool parse_special = false;
  // SentencePiece-style tokenizers: encode without the dummy-prefix space, for text that
  // continues a message (torchtune's trim_leading_whitespace). Ignored by tiktoken.
  bool trim_leading_whitespace = false;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Appends the ids of `text` to *ids. Any byte string is accepted; tokenizers that need
  // UTF-8 first replace invalid sequences with U+FFFD.
  virtual void EncodeAppend(std::string_view text, const EncodeOptions& options,
                            std::vector<int32_t>* ids) const = 0;

  std::vector<int32_t> Encode(std::string_view text, bool add_bos, bool add_eos) const {
    EncodeOptions options;
    options.add_bos = add_bos;
    options.add_eos = add_eos;
    return Encode(text, options);
  }
  std::vector<int32_t> Encode(std::string_view text, const EncodeOptions& options) const {
    std::vector<int32_t> ids;
    EncodeAppend(text, options, &ids);
    return ids;
  }

  // The text of `ids` as valid UTF-8 (invalid byte sequences become U+FFFD). An id outside
  // [0, vocab_size()) is an InvalidArgument error naming it.
  virtual absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids) const = 0;

  // Streaming output: the raw bytes token `id` contributes when it follows `prev_id` (-1 when
  // it starts the text). The bytes may be part of a UTF-8 character; feed them through a
  // Utf8StreamBuffer (tokenizers/utf8.h) before printing.
  virtual absl::StatusOr<std::string> DecodePiece(int32_t id, int32_t prev_id) const = 0;

  virtual int32_t bos_id() const = 0;
  virtual int32_t eos_id() const = 0;
  virtual int32_t pad_id() const = 0;
  virtual int32_t vocab_size() const = 0;
  // Generation stops after sampling any of these.
  virtual absl::Span<const int32_t> stop_tokens() const = 0;
  // The id of a special token given by its text ("<|eot_id|>"), if this tokenizer has it.
  virtual std::optional<int32_t> SpecialTokenId(std::string_view token) const {
    return std::nullopt;
  }
};

// Reads a whole file; NotFound / DataLoss errors name the path.
absl::StatusOr<std::string> ReadTokenizerFile(const std::string& path);

// InvalidArgument naming `where` and the id when id is outside [0, vocab_size).
absl::Status CheckTokenId(int32_t id, int32_t vocab_size, std::string_view where);

}  // namespace cctune

#endif  // CCTUNE_TOKENIZERS_TOKENIZER_H_
