// Internal: the only translation unit that includes <sentencepiece_processor.h>. Debian's
// SentencePiece header declares `namespace absl { using std::string_view; }`, which clashes
// with the real Abseil, so this bridge exposes SentencePiece through std types only and
// sentencepiece.cc (which uses Abseil) talks to it.
#ifndef CCTUNE_TOKENIZERS_SENTENCEPIECE_BRIDGE_H_
#define CCTUNE_TOKENIZERS_SENTENCEPIECE_BRIDGE_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace cctune {
namespace internal {

class SentencePieceBridge {
 public:
  // Null with *error set when the model cannot be loaded.
  static std::unique_ptr<SentencePieceBridge> Load(const std::string& path, std::string* error);
  ~SentencePieceBridge();

  // False with *error set on failure.
  bool Encode(std::string_view text, std::vector<int>* ids, std::string* error) const;
  bool Decode(const std::vector<int>& ids, std::string* text, std::string* error) const;

  int piece_size() const;
  int bos_id() const;
  int eos_id() const;
  int pad_id() const;  // -1 when the model has none
  const std::string& IdToPiece(int id) const;
  float GetScore(int id) const;
  bool IsControl(int id) const;
  bool IsByte(int id) const;
  bool IsUnknown(int id) const;

 private:
  SentencePieceBridge();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace internal
}  // namespace cctune

#endif  // CCTUNE_TOKENIZERS_SENTENCEPIECE_BRIDGE_H_
