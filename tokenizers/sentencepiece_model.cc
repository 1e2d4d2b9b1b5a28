#include "tokenizers/sentencepiece_model.h"

#include <cstdint>
#include <cstring>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/status.h"
#include "tokenizers/tokenizer.h"

namespace cctune {
namespace {

// Field numbers of sentencepiece_model.proto.
enum ModelProtoField { kPieces = 1, kTrainerSpec = 2, kNormalizerSpec = 3, kDenormalizerSpec = 5 };
enum PieceField { kPiece = 1, kScore = 2, kType = 3 };
enum TrainerField {
  kModelType = 3,
  kTreatWhitespaceAsSuffix = 24,
  kByteFallback = 35,
  kUnkId = 40,
  kBosId = 41,
  kEosId = 42,
  kPadId = 43,
  kUnkSurface = 44,
  kUnkPiece = 45,
  kBosPiece = 46,
  kEosPiece = 47,
  kPadPiece = 48,
};
enum NormalizerField {
  kName = 1,
  kPrecompiledCharsmap = 2,
  kAddDummyPrefix = 3,
  kRemoveExtraWhitespaces = 4,
  kEscapeWhitespaces = 5,
};

enum WireType { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

// One field of a message: its number, wire type and value (varint, fixed or bytes).
struct Field {
  uint32_t number = 0;
  int wire_type = 0;
  uint64_t varint = 0;  // kVarint, kFixed32, kFixed64
  std::string_view bytes;  // kLengthDelimited
};

// Reads the fields of one message in order; errors say what and at which offset of the file.
class WireReader {
 public:
  WireReader(std::string_view data, size_t base_offset, const std::string& path,
             absl::string_view message)
      : data_(data), base_(base_offset), path_(path), message_(message) {}

  bool done() const { return pos_ >= data_.size(); }
  size_t offset() const { return base_ + pos_; }

  absl::Status Next(Field* field) {
    const size_t start = pos_;
    uint64_t tag = 0;
    CCTUNE_RETURN_IF_ERROR(ReadVarint(&tag));
    field->wire_type = static_cast<int>(tag & 7);
    const uint64_t number = tag >> 3;
    if (number == 0 || number > 0x1FFFFFFF) {
      return Error(start, absl::StrCat("field number ", number, " is out of range"));
    }
    field->number = static_cast<uint32_t>(number);
    field_start_ = start;
    switch (field->wire_type) {
      case kVarint:
        return ReadVarint(&field->varint);
      case kFixed64:
      case kFixed32: {
        const size_t n = field->wire_type == kFixed32 ? 4 : 8;
        if (data_.size() - pos_ < n) {
          return Error(start, absl::StrCat("field ", number, " is truncated (", n,
                                           "-byte value, ", data_.size() - pos_, " bytes left)"));
        }
        uint64_t v = 0;
        for (size_t i = 0; i < n; ++i) v |= uint64_t{static_cast<uint8_t>(data_[pos_ + i])} << (8 * i);
        pos_ += n;
        field->varint = v;
        return absl::OkStatus();
      }
      case kLengthDelimited: {
        uint64_t length = 0;
        CCTUNE_RETURN_IF_ERROR(ReadVarint(&length));
        if (length > data_.size() - pos_) {
          return Error(start, absl::StrCat("field ", number, " has length ", length, " but only ",
                                           data_.size() - pos_, " bytes are left"));
        }
        field->bytes = data_.substr(pos_, length);
        pos_ += length;
        return absl::OkStatus();
      }
      default:
        return Error(start, absl::StrCat("field ", number, " has unsupported wire type ",
                                         field->wire_type));
    }
  }

  // Typed views of the field just read; each checks the wire type.
  absl::Status Bool(const Field& f, bool* out) const {
    CCTUNE_RETURN_IF_ERROR(Expect(f, kVarint));
    *out = f.varint != 0;
    return absl::OkStatus();
  }
  absl::Status String(const Field& f, std::string* out) const {
    CCTUNE_RETURN_IF_ERROR(Expect(f, kLengthDelimited));
    out->assign(f.bytes.data(), f.bytes.size());
    return absl::OkStatus();
  }
  // An int32 (negative values are ten-byte varints); anything wider is out of range.
  absl::Status Int32(const Field& f, absl::string_view name, int32_t* out) const {
    CCTUNE_RETURN_IF_ERROR(Expect(f, kVarint));
    const int64_t v = static_cast<int64_t>(f.varint);
    if (v < INT32_MIN || v > INT32_MAX) {
      return Error(field_start_, absl::StrCat(name, " ", v, " is out of the int32 range"));
    }
    *out = static_cast<int32_t>(v);
    return absl::OkStatus();
  }
  absl::Status Float(const Field& f, float* out) const {
    CCTUNE_RETURN_IF_ERROR(Expect(f, kFixed32));
    const uint32_t bits = static_cast<uint32_t>(f.varint);
    std::memcpy(out, &bits, sizeof(bits));
    return absl::OkStatus();
  }
  // An enum whose values must lie in [lo, hi].
  absl::Status Enum(const Field& f, int32_t lo, int32_t hi, absl::string_view name,
                    int32_t* out) const {
    CCTUNE_RETURN_IF_ERROR(Expect(f, kVarint));
    const int64_t v = static_cast<int64_t>(f.varint);
    if (v < lo || v > hi) {
      return Error(field_start_, absl::StrCat(name, " ", v, " is out of range [", lo, ", ", hi, "]"));
    }
    *out = static_cast<int32_t>(v);
    return absl::OkStatus();
  }

  absl::Status Error(size_t at, absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat("malformed SentencePiece model ", path_, ": ",
                                                   message_, " at byte ", base_ + at, ": ", what));
  }

 private:
  absl::Status ReadVarint(uint64_t* out) {
    const size_t start = pos_;
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= data_.size()) return Error(start, "truncated varint");
      const uint8_t b = static_cast<uint8_t>(data_[pos_++]);
      v |= uint64_t{b & 0x7Fu} << shift;
      if ((b & 0x80) == 0) {
        *out = v;
        return absl::OkStatus();
      }
    }
    return Error(start, "varint longer than 10 bytes");
  }

  absl::Status Expect(const Field& f, int wire_type) const {
    if (f.wire_type == wire_type) return absl::OkStatus();
    return Error(field_start_, absl::StrCat("field ", f.number, " has wire type ", f.wire_type,
                                            ", expected ", wire_type));
  }

  std::string_view data_;
  size_t base_;
  size_t pos_ = 0;
  size_t field_start_ = 0;
  const std::string& path_;
  absl::string_view message_;
};

// Offset of a sub-message inside the whole file, for error messages.
size_t OffsetIn(std::string_view whole, std::string_view part) {
  return static_cast<size_t>(part.data() - whole.data());
}

absl::Status ParsePiece(std::string_view file, std::string_view bytes, const std::string& path,
                        size_t index, SentencePieceModel::Piece* piece) {
  const std::string where = absl::StrCat("piece ", index);
  WireReader r(bytes, OffsetIn(file, bytes), path, where);
  Field f;
  while (!r.done()) {
    CCTUNE_RETURN_IF_ERROR(r.Next(&f));
    switch (f.number) {
      case kPiece:
        CCTUNE_RETURN_IF_ERROR(r.String(f, &piece->piece));
        break;
      case kScore:
        CCTUNE_RETURN_IF_ERROR(r.Float(f, &piece->score));
        break;
      case kType: {
        int32_t type = 0;
        CCTUNE_RETURN_IF_ERROR(r.Enum(f, 1, 6, "type", &type));
        piece->type = static_cast<SentencePieceModel::PieceType>(type);
        break;
      }
      default:
        break;  // unknown fields are skipped, as protobuf does
    }
  }
  return absl::OkStatus();
}

absl::Status ParseTrainerSpec(std::string_view file, std::string_view bytes,
                              const std::string& path, SentencePieceModel* model) {
  WireReader r(bytes, OffsetIn(file, bytes), path, "trainer_spec");
  Field f;
  while (!r.done()) {
    CCTUNE_RETURN_IF_ERROR(r.Next(&f));
    switch (f.number) {
      case kModelType: {
        int32_t type = 0;
        CCTUNE_RETURN_IF_ERROR(r.Enum(f, 1, 4, "model_type", &type));
        model->model_type = static_cast<SentencePieceModel::ModelType>(type);
        break;
      }
      case kTreatWhitespaceAsSuffix:
        CCTUNE_RETURN_IF_ERROR(r.Bool(f, &model->treat_whitespace_as_suffix));
        break;
      case kByteFallback:
        CCTUNE_RETURN_IF_ERROR(r.Bool(f, &model->byte_fallback));
        break;
      case kUnkId:
        CCTUNE_RETURN_IF_ERROR(r.Int32(f, "unk_id", &model->unk_id));
        break;
      case kBosId:
        CCTUNE_RETURN_IF_ERROR(r.Int32(f, "bos_id", &model->bos_id));
        break;
      case kEosId:
        CCTUNE_RETURN_IF_ERROR(r.Int32(f, "eos_id", &model->eos_id));
        break;
      case kPadId:
        CCTUNE_RETURN_IF_ERROR(r.Int32(f, "pad_id", &model->pad_id));
        break;
      case kUnkSurface:
        CCTUNE_RETURN_IF_ERROR(r.String(f, &model->unk_surface));
        break;
      case kUnkPiece:
        CCTUNE_RETURN_IF_ERROR(r.String(f, &model->unk_piece));
        break;
      case kBosPiece:
        CCTUNE_RETURN_IF_ERROR(r.String(f, &model->bos_piece));
        break;
      case kEosPiece:
        CCTUNE_RETURN_IF_ERROR(r.String(f, &model->eos_piece));
        break;
      case kPadPiece:
        CCTUNE_RETURN_IF_ERROR(r.String(f, &model->pad_piece));
        break;
      default:
        break;
    }
  }
  return absl::OkStatus();
}

absl::Status ParseNormalizerSpec(std::string_view file, std::string_view bytes,
                                 const std::string& path, absl::string_view message,
                                 SentencePieceModel* model, bool denormalizer) {
  WireReader r(bytes, OffsetIn(file, bytes), path, message);
  Field f;
  std::string ignored_name;
  bool ignored = false;
  while (!r.done()) {
    CCTUNE_RETURN_IF_ERROR(r.Next(&f));
    switch (f.number) {
      case kName:
        CCTUNE_RETURN_IF_ERROR(r.String(f, denormalizer ? &ignored_name : &model->normalizer_name));
        break;
      case kPrecompiledCharsmap:
        CCTUNE_RETURN_IF_ERROR(r.String(f, denormalizer ? &model->denormalizer_charsmap
                                                        : &model->precompiled_charsmap));
        break;
      case kAddDummyPrefix:
        CCTUNE_RETURN_IF_ERROR(r.Bool(f, denormalizer ? &ignored : &model->add_dummy_prefix));
        break;
      case kRemoveExtraWhitespaces:
        CCTUNE_RETURN_IF_ERROR(
            r.Bool(f, denormalizer ? &ignored : &model->remove_extra_whitespaces));
        break;
      case kEscapeWhitespaces:
        CCTUNE_RETURN_IF_ERROR(r.Bool(f, denormalizer ? &ignored : &model->escape_whitespaces));
        break;
      default:
        break;
    }
  }
  return absl::OkStatus();
}

absl::Status Invalid(const std::string& path, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("invalid SentencePiece model ", path, ": ", what));
}

// SentencePiece's own load-time checks (model_interface.cc), as errors instead of a dead model.
absl::Status CheckPieces(const SentencePieceModel& model, const std::string& path) {
  using Type = SentencePieceModel::PieceType;
  if (model.pieces.empty()) return Invalid(path, "the model has no pieces");
  if (model.pieces.size() > (size_t{1} << 30)) {
    return Invalid(path, absl::StrCat(model.pieces.size(), " pieces is too many"));
  }
  // SentencePiece keeps two maps: normal/user-defined/unused pieces, and the others.
  absl::flat_hash_set<std::string_view> normal, reserved;
  bool bytes_found[256] = {};
  int unk_id = -1;
  for (size_t i = 0; i < model.pieces.size(); ++i) {
    const SentencePieceModel::Piece& p = model.pieces[i];
    if (p.piece.empty()) return Invalid(path, absl::StrCat("piece ", i, " is empty"));
    const bool is_normal =
        p.type == Type::kNormal || p.type == Type::kUserDefined || p.type == Type::kUnused;
    if (!(is_normal ? normal : reserved).insert(p.piece).second) {
      return Invalid(path, absl::StrCat("duplicate piece \"", p.piece, "\" (id ", i, ")"));
    }
    if (p.type == Type::kUnknown) {
      if (unk_id >= 0) {
        return Invalid(path, absl::StrCat("pieces ", unk_id, " and ", i, " are both UNKNOWN"));
      }
      unk_id = static_cast<int>(i);
    }
    if (p.type == Type::kByte) {
      if (!model.byte_fallback) {
        return Invalid(path, absl::StrCat("byte piece \"", p.piece, "\" (id ", i,
                                          ") but trainer_spec.byte_fallback is false"));
      }
      const int byte = SentencePieceByteValue(p.piece);
      if (byte < 0) {
        return Invalid(path, absl::StrCat("byte piece ", i, " is \"", p.piece,
                                          "\", expected <0x00>..<0xFF>"));
      }
      bytes_found[byte] = true;
    }
  }
  if (unk_id < 0) return Invalid(path, "no piece has type UNKNOWN");
  const int64_t n = static_cast<int64_t>(model.pieces.size());
  for (const auto& [name, id] : {std::pair<const char*, int32_t>{"unk_id", model.unk_id},
                                 {"bos_id", model.bos_id},
                                 {"eos_id", model.eos_id},
                                 {"pad_id", model.pad_id}}) {
    if (id < -1 || id >= n) {
      return Invalid(path, absl::StrCat("trainer_spec.", name, " ", id,
                                        " is neither -1 nor a piece id (the model has ", n,
                                        " pieces)"));
    }
  }
  if (model.byte_fallback) {
    for (int b = 0; b < 256; ++b) {
      if (!bytes_found[b]) {
        return Invalid(path, absl::StrCat("byte_fallback is true but byte piece <0x",
                                          absl::Hex(b, absl::kZeroPad2), "> is missing"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

int SentencePieceByteValue(std::string_view piece) {
  if (piece.size() != 6 || piece.compare(0, 3, "<0x") != 0 || piece[5] != '>') return -1;
  int value = 0;
  for (size_t i = 3; i < 5; ++i) {
    const char c = piece[i];
    int digit;
    if (c >= '0' && c <= '9') {
      digit = c - '0';
    } else if (c >= 'A' && c <= 'F') {
      digit = c - 'A' + 10;
    } else {
      return -1;
    }
    value = value * 16 + digit;
  }
  return value;
}

absl::StatusOr<SentencePieceModel> ParseSentencePieceModel(std::string_view bytes,
                                                           const std::string& path) {
  SentencePieceModel model;
  WireReader r(bytes, 0, path, "ModelProto");
  Field f;
  while (!r.done()) {
    CCTUNE_RETURN_IF_ERROR(r.Next(&f));
    const bool is_message = f.number == kPieces || f.number == kTrainerSpec ||
                            f.number == kNormalizerSpec || f.number == kDenormalizerSpec;
    if (is_message && f.wire_type != kLengthDelimited) {
      return r.Error(r.offset(), absl::StrCat("field ", f.number, " has wire type ", f.wire_type,
                                              ", expected a message"));
    }
    switch (f.number) {
      case kPieces: {
        SentencePieceModel::Piece piece;
        CCTUNE_RETURN_IF_ERROR(ParsePiece(bytes, f.bytes, path, model.pieces.size(), &piece));
        model.pieces.push_back(std::move(piece));
        break;
      }
      case kTrainerSpec:
        CCTUNE_RETURN_IF_ERROR(ParseTrainerSpec(bytes, f.bytes, path, &model));
        break;
      case kNormalizerSpec:
        CCTUNE_RETURN_IF_ERROR(
            ParseNormalizerSpec(bytes, f.bytes, path, "normalizer_spec", &model, false));
        break;
      case kDenormalizerSpec:
        CCTUNE_RETURN_IF_ERROR(
            ParseNormalizerSpec(bytes, f.bytes, path, "denormalizer_spec", &model, true));
        break;
      default:
        break;
    }
  }
  CCTUNE_RETURN_IF_ERROR(CheckPieces(model, path));
  return model;
}

absl::StatusOr<SentencePieceModel> ReadSentencePieceModel(const std::string& path) {
  CCTUNE_ASSIGN_OR_RETURN(std::string bytes, ReadTokenizerFile(path));
  return ParseSentencePieceModel(bytes, path);
}

}  // namespace cctune
