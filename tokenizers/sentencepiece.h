// Llama 2's tokenizer: SentencePiece's BPE and Unigram encoders and its decoder, written out
// here over a .model read by tokenizers/sentencepiece_model.h (no libsentencepiece, whose
// private protobuf-lite clashed with the recipes' libprotobuf). Outputs match
// libsentencepiece's id for id (tokenizers/sentencepiece_reference_test.cc); on top of them
// come BOS/EOS, torchtune's trim_leading_whitespace, range-checked ids and run.c-style pieces
// for streaming.
//
// Supported: model_type BPE and UNIGRAM, the identity normaliser (an empty
// precompiled_charsmap: Llama 2, llama2.c's tok512), byte_fallback, user-defined,
// control and unused pieces. Anything else (NFKC charsmaps, WORD/CHAR models,
// treat_whitespace_as_suffix, a denormaliser) is an Unimplemented error at load.
#ifndef CCTUNE_TOKENIZERS_SENTENCEPIECE_H_
#define CCTUNE_TOKENIZERS_SENTENCEPIECE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "tokenizers/tokenizer.h"

namespace cctune {

class SentencePieceTokenizer final : public Tokenizer {
 public:
  // Loads a SentencePiece .model; errors name the path. A model without a pad id gets 0, as
  // torchtune's Llama 2 tokenizer does.
  static absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> Load(const std::string& path);
  // The same from the file's bytes; `path` names it in errors.
  static absl::StatusOr<std::unique_ptr<SentencePieceTokenizer>> FromString(
      std::string_view bytes, const std::string& path);
  ~SentencePieceTokenizer() override;

  // Invalid UTF-8 is replaced by U+FFFD first. parse_special is ignored: SentencePiece never
  // turns text such as "<s>" into control ids. trim_leading_whitespace encodes "\n" + text
  // and drops the ids of "\n", which removes the dummy-prefix space (torchtune's trick).
  void EncodeAppend(std::string_view text, const EncodeOptions& options,
                    std::vector<int32_t>* ids) const override;
  // SentencePiece's decode: control ids vanish, byte pieces join into characters (one U+FFFD
  // per byte that does not), "▁" becomes a space and the first piece's leading one is
  // dropped, unknown ids give the model's unk_surface (" ⁇ " by default).
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids) const override;
  // "▁" becomes a space, dropped at the start of the text (prev_id < 0) and after BOS, as in
  // llama2.c's run.c; byte pieces give their byte; control ids give ""; unknown ids give
  // unk_surface, as in Decode.
  absl::StatusOr<std::string> DecodePiece(int32_t id, int32_t prev_id) const override;

  int32_t bos_id() const override { return bos_id_; }
  int32_t eos_id() const override { return eos_id_; }
  int32_t pad_id() const override { return pad_id_; }
  int32_t vocab_size() const override { return vocab_size_; }
  absl::Span<const int32_t> stop_tokens() const override { return stop_tokens_; }

 private:
  struct Model;  // the pieces and their lookup tables (sentencepiece.cc)

  SentencePieceTokenizer();
  // SentencePiece's Encode of valid UTF-8, ids appended.
  void EncodeUtf8(std::string_view text, std::vector<int32_t>* ids) const;

  std::unique_ptr<const Model> model_;
  std::string path_;
  int32_t bos_id_ = -1;
  int32_t eos_id_ = -1;
  int32_t pad_id_ = 0;
  int32_t vocab_size_ = 0;
  std::vector<int32_t> stop_tokens_;
  size_t newline_prefix_ids_ = 0;  // number of ids SentencePiece gives "\n"
};

// Meta's Llama 2 tokenizer.model.
absl::StatusOr<std::unique_ptr<Tokenizer>> MakeLlama2Tokenizer(const std::string& path);

}  // namespace cctune

#endif  // CCTUNE_TOKENIZERS_SENTENCEPIECE_H_
