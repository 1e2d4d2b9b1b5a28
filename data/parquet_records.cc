#include "data/parquet_records.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace cctune {
namespace {

using Json = nlohmann::json;

// Parquet's enums (parquet.thrift), the values this reader handles.
enum PhysicalType {
  kBoolean = 0,
  kInt32 = 1,
  kInt64 = 2,
  kInt96 = 3,
  kFloat = 4,
  kDouble = 5,
  kByteArray = 6,
  kFixedLenByteArray = 7
};
enum Encoding { kPlain = 0, kPlainDictionary = 2, kRle = 3, kRleDictionary = 8 };
enum Codec { kUncompressed = 0, kSnappy = 1 };
enum PageType { kDataPage = 0, kDictionaryPage = 2, kDataPageV2 = 3 };
enum Repetition { kRequired = 0, kOptional = 1, kRepeated = 2 };

const char* CodecName(int64_t c) {
  static const char* const kNames[] = {"UNCOMPRESSED", "SNAPPY", "GZIP", "LZO",
                                       "BROTLI",       "LZ4",    "ZSTD", "LZ4_RAW"};
  return c >= 0 && c < 8 ? kNames[c] : "an unknown codec";
}

const char* TypeName(int64_t t) {
  static const char* const kNames[] = {"BOOLEAN", "INT32",  "INT64",      "INT96",
                                       "FLOAT",   "DOUBLE", "BYTE_ARRAY", "FIXED_LEN_BYTE_ARRAY"};
  return t >= 0 && t < 8 ? kNames[t] : "an unknown type";
}

// Bounds-checked reading of little-endian bytes; a read past the end sets failed().
class Bytes {
 public:
  Bytes(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}
  bool failed() const { return failed_; }
  size_t left() const { return static_cast<size_t>(end_ - p_); }
  const uint8_t* pos() const { return p_; }

  const uint8_t* Take(size_t n) {
    if (failed_ || n > left()) {
      failed_ = true;
      return nullptr;
    }
    const uint8_t* at = p_;
    p_ += n;
    return at;
  }
  uint8_t Byte() {
    const uint8_t* b = Take(1);
    return b == nullptr ? 0 : *b;
  }
  uint64_t Fixed(int n) {
    const uint8_t* b = Take(n);
    uint64_t v = 0;
    for (int i = 0; b != nullptr && i < n; ++i) v |= uint64_t{b[i]} << (8 * i);
    return v;
  }
  uint64_t Varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      const uint8_t b = Byte();
      v |= uint64_t{b & 0x7fu} << shift;
      if ((b & 0x80) == 0 || failed_) return v;
    }
    failed_ = true;
    return 0;
  }
  int64_t Zigzag() {
    const uint64_t v = Varint();
    return static_cast<int64_t>(v >> 1) ^ -static_cast<int64_t>(v & 1);
  }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
  bool failed_ = false;
};

// Thrift's compact protocol, as Parquet's metadata is written: the fields this reader needs
// are read by id, the rest skipped.
enum ThriftType {
  kStop = 0,
  kTrue = 1,
  kFalse = 2,
  kI8 = 3,
  kI16 = 4,
  kI32 = 5,
  kI64 = 6,
  kDoubleT = 7,
  kBinary = 8,
  kList = 9,
  kSet = 10,
  kMap = 11,
  kStruct = 12
};

class Thrift {
 public:
  explicit Thrift(Bytes* in) : in_(in) {}
  bool failed() const { return in_->failed() || failed_; }

  // The next field of the current struct; false at its end.
  bool NextField(int16_t* id, int* type) {
    const uint8_t h = in_->Byte();
    *type = h & 0x0f;
    if (*type == kStop || failed()) return false;
    const int delta = h >> 4;
    last_id_ =
        delta != 0 ? static_cast<int16_t>(last_id_ + delta) : static_cast<int16_t>(in_->Zigzag());
    *id = last_id_;
    return true;
  }
  int64_t Int() { return in_->Zigzag(); }
  std::string Binary() {
    const uint64_t n = in_->Varint();
    const uint8_t* b = in_->Take(n);
    return b == nullptr ? "" : std::string(reinterpret_cast<const char*>(b), n);
  }
  // List header: the element type and count.
  int64_t List(int* elem) {
    const uint8_t h = in_->Byte();
    *elem = h & 0x0f;
    int64_t n = h >> 4;
    if (n == 15) n = static_cast<int64_t>(in_->Varint());
    return n;
  }
  // Reads a nested struct with `fields(id, type)` handling (or skipping) each field.
  template <typename F>
  void Struct(F&& fields) {
    const int16_t saved = last_id_;
    last_id_ = 0;
    int16_t id;
    int type;
    while (!failed() && NextField(&id, &type)) fields(id, type);
    last_id_ = saved;
  }
  void Skip(int type, int depth = 0) {
    if (depth > 32) {
      failed_ = true;
      return;
    }
    switch (type) {
      case kTrue:
      case kFalse:
        return;
      case kI8:
        in_->Byte();
        return;
      case kI16:
      case kI32:
      case kI64:
        in_->Varint();
        return;
      case kDoubleT:
        in_->Take(8);
        return;
      case kBinary:
        Binary();
        return;
      case kList:
      case kSet: {
        int elem;
        const int64_t n = List(&elem);
        for (int64_t i = 0; i < n && !failed(); ++i) SkipElement(elem, depth + 1);
        return;
      }
      case kMap: {
        const int64_t n = static_cast<int64_t>(in_->Varint());
        if (n == 0) return;
        const uint8_t kv = in_->Byte();
        for (int64_t i = 0; i < n && !failed(); ++i) {
          SkipElement(kv >> 4, depth + 1);
          SkipElement(kv & 0x0f, depth + 1);
        }
        return;
      }
      case kStruct:
        Struct([&](int16_t, int t) { Skip(t, depth + 1); });
        return;
      default:
        failed_ = true;
    }
  }

 private:
  // In containers, booleans are one byte each.
  void SkipElement(int type, int depth) {
    if (type == kTrue || type == kFalse) {
      in_->Byte();
    } else {
      Skip(type, depth);
    }
  }

  Bytes* in_;
  int16_t last_id_ = 0;
  bool failed_ = false;
};

struct Column {
  std::string name;
  int64_t type = -1;
  int64_t repetition = kRequired;
  int64_t num_children = 0;
  int64_t converted_type = -1;  // 1 MAP, 2 MAP_KEY_VALUE, 3 LIST
  std::vector<int> children;    // indices into the schema
};

constexpr int64_t kMapAnnotation = 1, kMapKeyValue = 2, kListAnnotation = 3;

// A leaf column: its schema path (top-level field first) and level maxima.
struct Leaf {
  std::vector<int> path;
  int max_def = 0;
  int max_rep = 0;
  std::string dotted;  // "messages.list.element.content", for messages
};

// One value of a leaf as the pages store it.
struct Triple {
  int rep = 0;
  int def = 0;
  Json value;  // null unless def == max_def
};

struct Chunk {
  int64_t codec = 0;
  int64_t num_values = 0;
  int64_t data_page_offset = -1;
  int64_t dictionary_page_offset = -1;
  int64_t total_compressed_size = 0;
  bool external = false;  // its data in another file
};

struct RowGroup {
  int64_t num_rows = 0;
  std::vector<Chunk> chunks;
};

struct FileMeta {
  std::vector<Column> schema;  // [0] is the root
  int64_t num_rows = 0;
  std::vector<RowGroup> row_groups;
};

Chunk ReadColumnMeta(Thrift& t) {
  Chunk c;
  t.Struct([&](int16_t id, int type) {
    if (id == 4 && type == kI32) {
      c.codec = t.Int();
    } else if (id == 5 && type == kI64) {
      c.num_values = t.Int();
    } else if (id == 7 && type == kI64) {
      c.total_compressed_size = t.Int();
    } else if (id == 9 && type == kI64) {
      c.data_page_offset = t.Int();
    } else if (id == 11 && type == kI64) {
      c.dictionary_page_offset = t.Int();
    } else {
      t.Skip(type);
    }
  });
  return c;
}

FileMeta ReadFileMeta(Thrift& t) {
  FileMeta m;
  t.Struct([&](int16_t id, int type) {
    if (id == 2 && type == kList) {
      int elem;
      const int64_t n = t.List(&elem);
      for (int64_t i = 0; i < n && !t.failed(); ++i) {
        Column col;
        t.Struct([&](int16_t f, int ft) {
          if (f == 1 && ft == kI32) {
            col.type = t.Int();
          } else if (f == 3 && ft == kI32) {
            col.repetition = t.Int();
          } else if (f == 4 && ft == kBinary) {
            col.name = t.Binary();
          } else if (f == 5 && ft == kI32) {
            col.num_children = t.Int();
          } else if (f == 6 && ft == kI32) {
            col.converted_type = t.Int();
          } else {
            t.Skip(ft);
          }
        });
        m.schema.push_back(std::move(col));
      }
    } else if (id == 3 && type == kI64) {
      m.num_rows = t.Int();
    } else if (id == 4 && type == kList) {
      int elem;
      const int64_t n = t.List(&elem);
      for (int64_t i = 0; i < n && !t.failed(); ++i) {
        RowGroup rg;
        t.Struct([&](int16_t f, int ft) {
          if (f == 1 && ft == kList) {
            int e;
            const int64_t cols = t.List(&e);
            for (int64_t k = 0; k < cols && !t.failed(); ++k) {
              Chunk chunk;
              bool external = false;
              t.Struct([&](int16_t g, int gt) {
                if (g == 1 && gt == kBinary) {
                  external = !t.Binary().empty();
                } else if (g == 3 && gt == kStruct) {
                  chunk = ReadColumnMeta(t);
                } else {
                  t.Skip(gt);
                }
              });
              chunk.external = external;
              rg.chunks.push_back(chunk);
            }
          } else if (f == 3 && ft == kI64) {
            rg.num_rows = t.Int();
          } else {
            t.Skip(ft);
          }
        });
        m.row_groups.push_back(std::move(rg));
      }
    } else {
      t.Skip(type);
    }
  });
  return m;
}

struct PageHeader {
  int64_t type = -1;
  int64_t uncompressed_size = 0;
  int64_t compressed_size = 0;
  int64_t num_values = 0;
  int64_t encoding = 0;
  // v2 only
  int64_t def_length = 0;
  int64_t rep_length = 0;
  bool is_compressed = true;
};

PageHeader ReadPageHeader(Thrift& t) {
  PageHeader h;
  t.Struct([&](int16_t id, int type) {
    if (id == 1 && type == kI32) {
      h.type = t.Int();
    } else if (id == 2 && type == kI32) {
      h.uncompressed_size = t.Int();
    } else if (id == 3 && type == kI32) {
      h.compressed_size = t.Int();
    } else if ((id == 5 || id == 7 || id == 8) && type == kStruct) {
      t.Struct([&](int16_t f, int ft) {
        if (f == 1 && ft == kI32) {
          h.num_values = t.Int();
        } else if (id != 8 && f == 2 && ft == kI32) {
          h.encoding = t.Int();
        } else if (id == 8 && f == 4 && ft == kI32) {
          h.encoding = t.Int();
        } else if (id == 8 && f == 5 && ft == kI32) {
          h.def_length = t.Int();
        } else if (id == 8 && f == 6 && ft == kI32) {
          h.rep_length = t.Int();
        } else if (id == 8 && f == 7 && (ft == kTrue || ft == kFalse)) {
          h.is_compressed = ft == kTrue;
        } else {
          t.Skip(ft);
        }
      });
    } else {
      t.Skip(type);
    }
  });
  return h;
}

// Snappy's raw format: a varint length (which must be `expected`), then literals and
// back-references.
bool SnappyDecompress(const uint8_t* data, size_t size, uint64_t expected, std::string* out) {
  Bytes in(data, size);
  const uint64_t n = in.Varint();
  if (in.failed() || n != expected) return false;
  out->clear();
  out->reserve(n);
  while (in.left() > 0 && !in.failed()) {
    const uint8_t tag = in.Byte();
    size_t len = 0, offset = 0;
    switch (tag & 3) {
      case 0: {  // literal
        len = (tag >> 2) + 1;
        if (len > 60) len = in.Fixed(static_cast<int>(len - 60)) + 1;
        const uint8_t* lit = in.Take(len);
        if (lit == nullptr) return false;
        out->append(reinterpret_cast<const char*>(lit), len);
        continue;
      }
      case 1:
        len = ((tag >> 2) & 7) + 4;
        offset = (static_cast<size_t>(tag >> 5) << 8) | in.Byte();
        break;
      case 2:
        len = (tag >> 2) + 1;
        offset = in.Fixed(2);
        break;
      default:
        len = (tag >> 2) + 1;
        offset = in.Fixed(4);
        break;
    }
    if (in.failed() || offset == 0 || offset > out->size()) return false;
    const size_t from = out->size() - offset;
    for (size_t i = 0; i < len; ++i) out->push_back((*out)[from + i]);  // may overlap
  }
  return !in.failed() && out->size() == n;
}

// Parquet's RLE / bit-packed hybrid: `n` values of `bit_width` bits.
bool DecodeHybrid(Bytes& in, int bit_width, int64_t n, std::vector<uint32_t>* out) {
  out->clear();
  if (bit_width < 0 || bit_width > 32) return false;
  const int value_bytes = (bit_width + 7) / 8;
  while (static_cast<int64_t>(out->size()) < n) {
    const uint64_t header = in.Varint();
    if (in.failed()) return false;
    if (header & 1) {  // bit-packed groups of 8
      const uint64_t groups = header >> 1;
      const uint8_t* b = in.Take(groups * bit_width);
      if (b == nullptr) return false;
      for (uint64_t v = 0; v < groups * 8; ++v) {
        uint32_t value = 0;
        for (int k = 0; k < bit_width; ++k) {
          const uint64_t bit = v * bit_width + k;
          value |= uint32_t{(b[bit / 8] >> (bit % 8)) & 1u} << k;
        }
        if (static_cast<int64_t>(out->size()) < n) out->push_back(value);
      }
    } else {  // a run
      const uint64_t run = header >> 1;
      const uint32_t value = static_cast<uint32_t>(in.Fixed(value_bytes));
      if (in.failed() || run == 0) return false;
      for (uint64_t k = 0; k < run && static_cast<int64_t>(out->size()) < n; ++k) {
        out->push_back(value);
      }
    }
  }
  return true;
}

// `n` PLAIN values of `type`.
bool DecodePlain(Bytes& in, int64_t type, int64_t n, std::vector<Json>* out) {
  // Each value takes a bit (booleans) or at least 4 bytes: a damaged count fails here, before
  // anything is allocated for it.
  const uint64_t per = type == kBoolean ? 0 : (type == kInt64 || type == kDouble ? 8 : 4);
  if (n < 0 || (per == 0 ? static_cast<uint64_t>(n) > 8 * in.left()
                         : static_cast<uint64_t>(n) > in.left() / per)) {
    return false;
  }
  out->reserve(out->size() + n);
  if (type == kBoolean) {
    const uint8_t* b = in.Take((n + 7) / 8);
    if (b == nullptr) return false;
    for (int64_t i = 0; i < n; ++i) out->push_back(((b[i / 8] >> (i % 8)) & 1) != 0);
    return true;
  }
  for (int64_t i = 0; i < n; ++i) {
    switch (type) {
      case kInt32:
        out->push_back(static_cast<int32_t>(in.Fixed(4)));
        break;
      case kInt64:
        out->push_back(static_cast<int64_t>(in.Fixed(8)));
        break;
      case kFloat: {
        const uint32_t bits = static_cast<uint32_t>(in.Fixed(4));
        float f;
        std::memcpy(&f, &bits, 4);
        out->push_back(f);
        break;
      }
      case kDouble: {
        const uint64_t bits = in.Fixed(8);
        double d;
        std::memcpy(&d, &bits, 8);
        out->push_back(d);
        break;
      }
      default: {  // kByteArray
        const uint32_t len = static_cast<uint32_t>(in.Fixed(4));
        const uint8_t* b = in.Take(len);
        if (b == nullptr) return false;
        out->push_back(std::string(reinterpret_cast<const char*>(b), len));
      }
    }
    if (in.failed()) return false;
  }
  return true;
}

class ChunkReader {
 public:
  ChunkReader(const std::string& bytes, const std::string& file, const Column& column,
              const Leaf& leaf, const Chunk& chunk)
      : bytes_(bytes), file_(file), column_(column), leaf_(leaf), chunk_(chunk) {}

  // Appends the chunk's values with their levels to `out`.
  absl::Status Read(std::vector<Triple>* out) {
    if (chunk_.external) return Unimplemented("its data is in another file");
    if (chunk_.codec != kUncompressed && chunk_.codec != kSnappy) {
      return Unimplemented(absl::StrCat("it is compressed with ", CodecName(chunk_.codec),
                                        " (UNCOMPRESSED and SNAPPY are read)"));
    }
    int64_t pos =
        chunk_.dictionary_page_offset > 0 && chunk_.dictionary_page_offset < chunk_.data_page_offset
            ? chunk_.dictionary_page_offset
            : chunk_.data_page_offset;
    int64_t values = 0;
    while (values < chunk_.num_values) {
      if (pos < 4 || pos >= static_cast<int64_t>(bytes_.size())) return Damaged("page offset");
      Bytes in(reinterpret_cast<const uint8_t*>(bytes_.data()) + pos, bytes_.size() - pos);
      Thrift t(&in);
      const PageHeader h = ReadPageHeader(t);
      if (t.failed() || h.compressed_size < 0 || h.uncompressed_size < 0 ||
          static_cast<size_t>(h.compressed_size) > in.left()) {
        return Damaged("page header");
      }
      const uint8_t* body = in.pos();
      pos = static_cast<int64_t>(body - reinterpret_cast<const uint8_t*>(bytes_.data())) +
            h.compressed_size;
      if (h.type == kDictionaryPage) {
        std::string page;
        CCTUNE_RETURN_IF_ERROR(Decompress(body, h.compressed_size, h.uncompressed_size, &page));
        if (h.encoding != kPlain && h.encoding != kPlainDictionary) {
          return Unimplemented(absl::StrCat("its dictionary has encoding ", h.encoding));
        }
        Bytes d(reinterpret_cast<const uint8_t*>(page.data()), page.size());
        dictionary_.clear();
        if (!DecodePlain(d, column_.type, h.num_values, &dictionary_)) return Damaged("dictionary");
        continue;
      }
      if (h.type != kDataPage && h.type != kDataPageV2) continue;  // index pages
      // Values cost at least a bit each, bar runs of nulls: the bound keeps a damaged count
      // from allocating far beyond the page.
      if (h.num_values <= 0 || h.num_values > chunk_.num_values - values ||
          h.num_values > std::max<int64_t>(8 * h.uncompressed_size + 8, 1 << 20)) {
        return Damaged("page value count");
      }
      CCTUNE_RETURN_IF_ERROR(ReadDataPage(h, body, out));
      values += h.num_values;
    }
    return absl::OkStatus();
  }

 private:
  absl::Status Unimplemented(const std::string& why) const {
    return absl::UnimplementedError(absl::StrCat(file_, ": column '", leaf_.dotted, "': ", why,
                                                 "; convert the file to JSON lines"));
  }
  absl::Status Damaged(const std::string& what) const {
    return absl::DataLossError(
        absl::StrCat(file_, ": column '", leaf_.dotted, "': damaged Parquet file (", what, ")"));
  }

  absl::Status Decompress(const uint8_t* data, int64_t size, int64_t uncompressed,
                          std::string* out) const {
    if (chunk_.codec == kUncompressed) {
      out->assign(reinterpret_cast<const char*>(data), size);
    } else if (!SnappyDecompress(data, size, static_cast<uint64_t>(uncompressed), out)) {
      return Damaged("snappy data");
    }
    if (static_cast<int64_t>(out->size()) != uncompressed) return Damaged("page size");
    return absl::OkStatus();
  }

  // Levels of `n` values, `max` at most: a run of bit width ceil(log2(max + 1)); none (all
  // zero) when max is 0.
  absl::Status Levels(Bytes& in, int max, int64_t n, std::vector<uint32_t>* out) const {
    if (max == 0) {
      out->assign(n, 0);
      return absl::OkStatus();
    }
    int width = 0;
    while ((1 << width) <= max) ++width;
    if (!DecodeHybrid(in, width, n, out)) return Damaged("levels");
    for (uint32_t v : *out) {
      if (v > static_cast<uint32_t>(max)) return Damaged("level out of range");
    }
    return absl::OkStatus();
  }

  absl::Status ReadDataPage(const PageHeader& h, const uint8_t* body, std::vector<Triple>* out) {
    std::string page;
    std::vector<uint32_t> reps, defs;
    if (h.type == kDataPageV2) {
      // Levels first, never compressed; then the values, compressed unless is_compressed is
      // false.
      if (h.rep_length < 0 || h.def_length < 0 || h.rep_length + h.def_length > h.compressed_size) {
        return Damaged("levels");
      }
      Bytes rep(body, h.rep_length);
      CCTUNE_RETURN_IF_ERROR(Levels(rep, leaf_.max_rep, h.num_values, &reps));
      Bytes def(body + h.rep_length, h.def_length);
      CCTUNE_RETURN_IF_ERROR(Levels(def, leaf_.max_def, h.num_values, &defs));
      const int64_t skip = h.rep_length + h.def_length;
      const uint8_t* values = body + skip;
      const int64_t size = h.compressed_size - skip;
      const int64_t usize = h.uncompressed_size - skip;
      if (h.is_compressed) {
        CCTUNE_RETURN_IF_ERROR(Decompress(values, size, usize, &page));
      } else {
        page.assign(reinterpret_cast<const char*>(values), size);
      }
    } else {
      CCTUNE_RETURN_IF_ERROR(Decompress(body, h.compressed_size, h.uncompressed_size, &page));
    }
    Bytes in(reinterpret_cast<const uint8_t*>(page.data()), page.size());
    if (h.type == kDataPage) {  // each present level run: a 4-byte length, then RLE
      for (auto [max, levels] :
           {std::pair{leaf_.max_rep, &reps}, std::pair{leaf_.max_def, &defs}}) {
        if (max == 0) {
          levels->assign(h.num_values, 0);
          continue;
        }
        const uint32_t len = static_cast<uint32_t>(in.Fixed(4));
        const uint8_t* lv = in.Take(len);
        if (lv == nullptr) return Damaged("levels");
        Bytes run(lv, len);
        CCTUNE_RETURN_IF_ERROR(Levels(run, max, h.num_values, levels));
      }
    }
    int64_t present = 0;
    for (uint32_t d : defs) present += d == static_cast<uint32_t>(leaf_.max_def);
    std::vector<Json> values;
    if (h.encoding == kPlain) {
      if (!DecodePlain(in, column_.type, present, &values)) return Damaged("values");
    } else if (h.encoding == kPlainDictionary || h.encoding == kRleDictionary) {
      const int width = in.Byte();
      std::vector<uint32_t> idx;
      if (in.failed() || !DecodeHybrid(in, width, present, &idx)) return Damaged("indices");
      values.reserve(present);
      for (uint32_t i : idx) {
        if (i >= dictionary_.size()) return Damaged("dictionary index");
        values.push_back(dictionary_[i]);
      }
    } else if (h.encoding == kRle && column_.type == kBoolean) {
      // Booleans as a length-prefixed RLE / bit-packed run of 1-bit values (pages v2).
      const uint32_t len = static_cast<uint32_t>(in.Fixed(4));
      const uint8_t* b = in.Take(len);
      std::vector<uint32_t> bits;
      if (b == nullptr) return Damaged("boolean values");
      Bytes run(b, len);
      if (!DecodeHybrid(run, 1, present, &bits)) return Damaged("boolean values");
      for (uint32_t v : bits) values.push_back(v != 0);
    } else {
      return Unimplemented(absl::StrCat("its pages have encoding ", h.encoding,
                                        " (PLAIN and dictionary encodings are read)"));
    }
    size_t next = 0;
    for (int64_t i = 0; i < h.num_values; ++i) {
      Triple t;
      t.rep = static_cast<int>(reps[i]);
      t.def = static_cast<int>(defs[i]);
      if (t.def == leaf_.max_def) t.value = std::move(values[next++]);
      out->push_back(std::move(t));
    }
    return absl::OkStatus();
  }

  const std::string& bytes_;
  const std::string& file_;
  const Column& column_;
  const Leaf& leaf_;
  const Chunk& chunk_;
  std::vector<Json> dictionary_;
};

// Record assembly (Dremel) for at most one level of repetition: each value is written into
// its row at its schema path; groups become objects, a repeated node an array (element i of
// the row's list for the i-th value of the row), and an undefined node null (or an empty
// array when it is the repeated one).
absl::Status Assemble(const std::vector<Column>& schema, const Leaf& leaf,
                      const std::vector<Triple>& triples, std::vector<Json>* rows) {
  int64_t r = -1;
  size_t element = 0;
  for (const Triple& t : triples) {
    if (t.rep == 0) {
      ++r;
      element = 0;
    } else {
      ++element;
    }
    if (r < 0 || r >= static_cast<int64_t>(rows->size()) || element > 1u << 24) {
      return absl::DataLossError(
          absl::StrCat("column '", leaf.dotted, "': damaged Parquet file (repetition levels)"));
    }
    Json* cur = &(*rows)[r];
    int level = 0;
    for (size_t i = 0; i < leaf.path.size(); ++i) {
      const Column& node = schema[leaf.path[i]];
      const bool last = i + 1 == leaf.path.size();
      if (node.repetition != kRequired) ++level;
      if (!cur->is_object()) {  // two columns claim one place: only a damaged schema does that
        return absl::DataLossError(
            absl::StrCat("column '", leaf.dotted, "': damaged Parquet file (schema paths)"));
      }
      Json& slot = (*cur)[node.name];
      if (t.def < level) {  // undefined from here on
        if (slot.is_null()) slot = node.repetition == kRepeated ? Json::array() : Json();
        break;
      }
      Json* target = &slot;
      if (node.repetition == kRepeated) {
        if (!slot.is_array()) slot = Json::array();
        while (slot.size() <= element) slot.push_back(last ? Json() : Json::object());
        target = &slot[element];
      }
      if (last) {
        *target = t.value;
      } else if (!target->is_object()) {
        *target = Json::object();
      }
      cur = target;
    }
  }
  if (r + 1 != static_cast<int64_t>(rows->size())) {
    return absl::DataLossError(
        absl::StrCat("column '", leaf.dotted, "': damaged Parquet file (row count)"));
  }
  return absl::OkStatus();
}

void CollapseOne(const std::vector<Column>& schema, const Column& node, Json& v);

// The fields of one instance of group `node`.
void CollapseFields(const std::vector<Column>& schema, const Column& node, Json& obj) {
  if (!obj.is_object()) return;
  for (int c : node.children) {
    const Column& child = schema[c];
    auto it = obj.find(child.name);
    if (it == obj.end()) continue;
    if (child.repetition == kRepeated && it->is_array()) {
      for (Json& e : *it) CollapseOne(schema, child, e);
    } else {
      CollapseOne(schema, child, *it);
    }
  }
}

// LIST-annotated groups, {list: [{element: x}, ...]} as assembled, become [x, ...] (the
// three-level layout writers use; a repeated child with several fields, or named "array" or
// "<name>_tuple", is the element itself, as the format's backward-compatibility rules say).
void CollapseOne(const std::vector<Column>& schema, const Column& node, Json& v) {
  if (node.children.empty() || v.is_null()) return;
  if (node.converted_type == kListAnnotation && node.children.size() == 1 &&
      schema[node.children[0]].repetition == kRepeated) {
    const Column& rep = schema[node.children[0]];
    const bool three_level =
        rep.children.size() == 1 && rep.name != "array" && rep.name != node.name + "_tuple";
    Json out = Json::array();
    auto it = v.find(rep.name);
    if (it != v.end() && it->is_array()) {
      for (Json& e : *it) {
        if (three_level) {
          const Column& elem = schema[rep.children[0]];
          Json x = e.is_object() && e.contains(elem.name) ? std::move(e[elem.name]) : Json();
          CollapseOne(schema, elem, x);
          out.push_back(std::move(x));
        } else {
          CollapseOne(schema, rep, e);
          out.push_back(std::move(e));
        }
      }
    }
    v = std::move(out);
    return;
  }
  CollapseFields(schema, node, v);
}

}  // namespace

absl::StatusOr<JsonRecords> ParseParquetRecords(const std::string& bytes, const std::string& file) {
  const auto damaged = [&](const std::string& what) {
    return absl::DataLossError(absl::StrCat(file, ": damaged Parquet file (", what, ")"));
  };
  if (bytes.size() < 12 || bytes.compare(0, 4, "PAR1") != 0) {
    if (bytes.size() >= 4 && bytes.compare(bytes.size() - 4, 4, "PARE") == 0) {
      return absl::UnimplementedError(
          absl::StrCat(file, ": encrypted Parquet files cannot be read"));
    }
    return damaged("no PAR1 magic");
  }
  if (bytes.compare(bytes.size() - 4, 4, "PAR1") != 0) return damaged("no PAR1 footer");
  Bytes tail(reinterpret_cast<const uint8_t*>(bytes.data()) + bytes.size() - 8, 4);
  const uint64_t meta_len = tail.Fixed(4);
  if (meta_len > bytes.size() - 12) return damaged("footer length");
  Bytes meta_bytes(reinterpret_cast<const uint8_t*>(bytes.data()) + bytes.size() - 8 - meta_len,
                   meta_len);
  Thrift t(&meta_bytes);
  const FileMeta meta = ReadFileMeta(t);
  if (t.failed() || meta.schema.empty()) return damaged("file metadata");
  // Any real file spends at least a bit per row: this bounds what a damaged count allocates.
  if (meta.num_rows < 0 || static_cast<uint64_t>(meta.num_rows) > 8 * bytes.size() + 1024) {
    return damaged("row count");
  }

  // The schema tree (a depth-first list with child counts) and its leaves, in column order.
  std::vector<Column> schema = meta.schema;
  std::vector<Leaf> leaves;
  {
    struct Open {
      int node;
      int64_t left;  // children still to come
    };
    std::vector<Open> stack;
    std::vector<int> path;
    for (size_t i = 0; i < schema.size(); ++i) {
      if (i > 0) {
        if (stack.empty()) return damaged("schema tree");
        schema[stack.back().node].children.push_back(static_cast<int>(i));
        --stack.back().left;
      }
      if (schema[i].num_children < 0 || schema[i].num_children > 100000) {
        return damaged("schema tree");
      }
      if (i > 0 && schema[i].num_children == 0) {
        Leaf leaf;
        for (const Open& o : stack) {
          if (o.node != 0) leaf.path.push_back(o.node);
        }
        leaf.path.push_back(static_cast<int>(i));
        for (int n : leaf.path) {
          const Column& c = schema[n];
          leaf.max_def += c.repetition != kRequired;
          leaf.max_rep += c.repetition == kRepeated;
          absl::StrAppend(&leaf.dotted, leaf.dotted.empty() ? "" : ".", c.name);
          if (c.converted_type == kMapAnnotation || c.converted_type == kMapKeyValue) {
            return absl::UnimplementedError(absl::StrCat(
                file, ": column '", c.name,
                "' is a map, which cannot be read yet; convert the file to JSON lines"));
          }
        }
        leaves.push_back(std::move(leaf));
      } else {
        stack.push_back({static_cast<int>(i), schema[i].num_children});
      }
      while (!stack.empty() && stack.back().left == 0) stack.pop_back();
    }
    if (!stack.empty()) return damaged("schema tree");
  }
  for (const Leaf& leaf : leaves) {
    const Column& c = schema[leaf.path.back()];
    if (leaf.max_rep > 1) {
      return absl::UnimplementedError(absl::StrCat(
          file, ": column '", leaf.dotted,
          "' is nested in more than one list, which cannot be read yet; convert the file to "
          "JSON lines"));
    }
    if (c.type != kBoolean && c.type != kInt32 && c.type != kInt64 && c.type != kFloat &&
        c.type != kDouble && c.type != kByteArray) {
      return absl::UnimplementedError(absl::StrCat(file, ": column '", leaf.dotted, "' has type ",
                                                   TypeName(c.type),
                                                   ", which cannot be read yet; convert the file "
                                                   "to JSON lines"));
    }
  }
  std::vector<Json> rows;
  rows.reserve(meta.num_rows);
  for (const RowGroup& rg : meta.row_groups) {
    if (rg.chunks.size() != leaves.size()) return damaged("row group columns");
    if (rg.num_rows < 0 || rg.num_rows > meta.num_rows - static_cast<int64_t>(rows.size())) {
      return damaged("row group rows");
    }
    std::vector<Json> group(rg.num_rows, Json::object());
    for (size_t c = 0; c < leaves.size(); ++c) {
      const Chunk& chunk = rg.chunks[c];
      if (leaves[c].max_rep == 0
              ? chunk.num_values != rg.num_rows
              : chunk.num_values < rg.num_rows ||
                    static_cast<uint64_t>(chunk.num_values) > 8 * bytes.size() + 1024) {
        return damaged("column value count");
      }
      std::vector<Triple> triples;
      CCTUNE_RETURN_IF_ERROR(
          ChunkReader(bytes, file, schema[leaves[c].path.back()], leaves[c], chunk).Read(&triples));
      if (static_cast<int64_t>(triples.size()) != chunk.num_values) {
        return damaged("page value counts");
      }
      absl::Status s = Assemble(schema, leaves[c], triples, &group);
      if (!s.ok()) return absl::DataLossError(absl::StrCat(file, ": ", s.message()));
    }
    for (Json& row : group) {
      CollapseFields(schema, schema[0], row);
      rows.push_back(std::move(row));
    }
  }
  if (static_cast<int64_t>(rows.size()) != meta.num_rows) return damaged("row count");
  JsonRecords out;
  out.file = file;
  out.records.resize(rows.size());
  for (size_t r = 0; r < rows.size(); ++r) {
    out.records[r].value = std::move(rows[r]);
    out.records[r].line = static_cast<int64_t>(r) + 1;
  }
  return out;
}

absl::StatusOr<JsonRecords> ReadParquetRecords(const std::string& path) {
  CCTUNE_ASSIGN_OR_RETURN(const std::string bytes, ReadDatasetFile(path));
  return ParseParquetRecords(bytes, path);
}

absl::StatusOr<JsonRecords> ReadRecordsFile(const std::string& path) {
  if (absl::EndsWith(absl::AsciiStrToLower(path), ".parquet")) return ReadParquetRecords(path);
  return ReadJsonRecords(path);
}

}  // namespace cctune
