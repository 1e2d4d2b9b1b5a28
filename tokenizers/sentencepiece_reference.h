// Test-only: libsentencepiece (Debian's libsentencepiece-dev) behind std types, the
// independent reference that tokenizers/sentencepiece_reference_test.cc compares cctune's own
// SentencePiece with. <sentencepiece_processor.h> declares `namespace absl` aliases that clash
// with the real Abseil, so only sentencepiece_reference.cc includes it. Never link this into
// anything that also links libprotobuf (libsentencepiece carries its own protobuf-lite).
#ifndef CCTUNE_TOKENIZERS_SENTENCEPIECE_REFERENCE_H_
#define CCTUNE_TOKENIZERS_SENTENCEPIECE_REFERENCE_H_

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace cctune {
namespace testing {

class ReferenceSentencePiece {
 public:
  // Null with *error set when libsentencepiece cannot load the model.
  static std::unique_ptr<ReferenceSentencePiece> Load(const std::string& path,
                                                      std::string* error);
  ~ReferenceSentencePiece();

  // False with *error set on failure.
  bool Encode(std::string_view text, std::vector<int>* ids, std::string* error) const;
  bool Decode(const std::vector<int>& ids, std::string* text, std::string* error) const;
  int piece_size() const;

 private:
  ReferenceSentencePiece();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace testing
}  // namespace cctune

#endif  // CCTUNE_TOKENIZERS_SENTENCEPIECE_REFERENCE_H_
