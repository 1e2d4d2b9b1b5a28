// A SentencePiece .model file (a serialized sentencepiece.ModelProto) read by a small
// hand-written protobuf wire-format reader, so that nothing here links libprotobuf or
// libsentencepiece (whose private protobuf-lite clashed with the system libprotobuf in the
// recipes). Only the fields encoding and decoding need are kept; the rest are skipped.
//
// Every malformed file is an InvalidArgument naming the path and the problem (truncated
// varint, length past the end, enum or id out of range, duplicate piece, ...).
#ifndef CCTUNE_TOKENIZERS_SENTENCEPIECE_MODEL_H_
#define CCTUNE_TOKENIZERS_SENTENCEPIECE_MODEL_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace cctune {

struct SentencePieceModel {
  // ModelProto.SentencePiece.Type.
  enum class PieceType : int32_t {
    kNormal = 1,
    kUnknown = 2,
    kControl = 3,
    kUserDefined = 4,
    kUnused = 5,
    kByte = 6,
  };
  // TrainerSpec.ModelType.
  enum class ModelType : int32_t { kUnigram = 1, kBpe = 2, kWord = 3, kChar = 4 };

  struct Piece {
    std::string piece;
    float score = 0.0f;
    PieceType type = PieceType::kNormal;
  };

  std::vector<Piece> pieces;  // index = id

  // TrainerSpec (defaults are the .proto's).
  ModelType model_type = ModelType::kUnigram;
  bool byte_fallback = false;
  bool treat_whitespace_as_suffix = false;
  // The trainer's *_id fields (checked to name a piece or be -1). SentencePiece resolves
  // bos/eos/pad/unk through the piece names below, not these, and so do we.
  int32_t unk_id = 0;
  int32_t bos_id = 1;
  int32_t eos_id = 2;
  int32_t pad_id = -1;
  // SentencePiece resolves bos/eos/pad/unk through these piece names, not the *_id fields.
  std::string unk_piece = "<unk>";
  std::string bos_piece = "<s>";
  std::string eos_piece = "</s>";
  std::string pad_piece = "<pad>";
  std::string unk_surface = " \xE2\x81\x87 ";  // " ⁇ "

  // NormalizerSpec.
  std::string normalizer_name;
  std::string precompiled_charsmap;
  bool add_dummy_prefix = true;
  bool remove_extra_whitespaces = true;
  bool escape_whitespaces = true;
  // DenormalizerSpec: only whether it would rewrite decoded text.
  std::string denormalizer_charsmap;
};

// Parses a serialized ModelProto. `path` only names the file in errors. Checks the wire
// format and what SentencePiece checks at load: non-empty unique pieces, exactly one UNKNOWN
// piece, BYTE pieces "<0xXX>" only with byte_fallback, and then all 256 of them; and that the
// trainer's special ids are -1 or a piece id.
absl::StatusOr<SentencePieceModel> ParseSentencePieceModel(std::string_view bytes,
                                                           const std::string& path);

// Reads and parses `path` (NotFound when it cannot be opened).
absl::StatusOr<SentencePieceModel> ReadSentencePieceModel(const std::string& path);

// The byte of a "<0xXX>" piece (two upper-case hex digits, as SentencePiece writes them), or -1.
int SentencePieceByteValue(std::string_view piece);

}  // namespace cctune

#endif  // CCTUNE_TOKENIZERS_SENTENCEPIECE_MODEL_H_
