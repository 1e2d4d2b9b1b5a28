#include "checkpoint/safetensors.h"

#include <dirent.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "core/random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace cctune {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

constexpr char kAssets[] = "tests/assets/checkpoint";

std::string TestDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string dir = absl::StrCat(tmp ? tmp : "/tmp", "/safetensors_test_", name);
  std::string cmd = absl::StrCat("mkdir -p '", dir, "'");
  EXPECT_EQ(std::system(cmd.c_str()), 0);
  return dir;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), bytes.size());
}

std::string Le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return s;
}

// A file image from a header text and a data section, written the way the format says.
std::string Image(const std::string& header, const std::string& data) {
  return Le64(header.size()) + header + data;
}

// Raw bits of element i of a contiguous tensor, widened to 64 bits (sign-extended ints).
int64_t BitsAt(const Tensor& t, int64_t i) {
  const char* p = static_cast<const char*>(t.raw_data());
  switch (t.dtype()) {
    case DType::kF32: {
      uint32_t u;
      std::memcpy(&u, p + 4 * i, 4);
      return u;
    }
    case DType::kBF16:
    case DType::kF16: {
      uint16_t u;
      std::memcpy(&u, p + 2 * i, 2);
      return u;
    }
    case DType::kI32: {
      int32_t v;
      std::memcpy(&v, p + 4 * i, 4);
      return v;
    }
    case DType::kI64: {
      int64_t v;
      std::memcpy(&v, p + 8 * i, 8);
      return v;
    }
    case DType::kBool:
      return static_cast<uint8_t>(p[i]);
  }
  return 0;
}

// Independent IEEE half decoding, in double.
double HalfBitsToDouble(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  double v;
  if (exp == 0) {
    v = std::ldexp(mant, -24);
  } else if (exp == 31) {
    v = mant ? NAN : INFINITY;
  } else {
    v = std::ldexp(1024 + mant, exp - 25);
  }
  return sign ? -v : v;
}

TEST(SafetensorsTest, ReadsPythonFixtureExactly) {
  const std::string path = absl::StrCat(kAssets, "/dtypes.safetensors");
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  const Json expected = Json::parse(ReadAll(absl::StrCat(kAssets, "/dtypes_expected.json")));
  std::map<std::string, std::string> meta = expected["metadata"];
  EXPECT_EQ(file->metadata(), meta);
  ASSERT_EQ(file->Names().size(), expected["tensors"].size());
  int checked_elements = 0;
  for (auto it = expected["tensors"].begin(); it != expected["tensors"].end(); ++it) {
    SCOPED_TRACE(it.key());
    auto t = file->Load(it.key());
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(SafetensorsDTypeName(t->dtype()), it.value()["dtype"].get<std::string>());
    EXPECT_EQ(t->shape(), it.value()["shape"].get<Shape>());
    const auto& bits = it.value()["bits"];
    ASSERT_EQ(static_cast<size_t>(t->numel()), bits.size());
    for (int64_t i = 0; i < t->numel(); ++i) {
      ASSERT_EQ(BitsAt(*t, i), bits[i].get<int64_t>()) << "element " << i;
      ++checked_elements;
    }
  }
  EXPECT_GT(checked_elements, 150);
}

TEST(SafetensorsTest, LoadsAreZeroCopyViewsThatOutliveTheFile) {
  Tensor view;
  {
    auto file = SafetensorsFile::Open(absl::StrCat(kAssets, "/dtypes.safetensors"));
    ASSERT_TRUE(file.ok()) << file.status();
    auto t = file->Load("f32_odd");
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_TRUE(t->storage() == file->mapping());
    EXPECT_FALSE(t->storage()->owned());
    view = *t;
  }
  // The mapping stays alive with the view; writes are private (copy-on-write).
  ASSERT_EQ(view.shape(), (Shape{3, 5, 7}));
  const float first = view.data<float>()[0];
  view.data<float>()[0] = 42.f;
  auto again = SafetensorsFile::Open(absl::StrCat(kAssets, "/dtypes.safetensors"));
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->Load("f32_odd")->data<float>()[0], first);
}

TEST(SafetensorsTest, LoadConvertsToTargetDType) {
  auto file = SafetensorsFile::Open(absl::StrCat(kAssets, "/dtypes.safetensors"));
  ASSERT_TRUE(file.ok()) << file.status();
  for (const std::string name : {"bf16_5x7", "f16_13", "i32_3x3", "i64_9", "bool_11"}) {
    SCOPED_TRACE(name);
    auto raw = file->Load(name);
    auto f = file->Load(name, DType::kF32);
    ASSERT_TRUE(raw.ok() && f.ok());
    ASSERT_EQ(f->dtype(), DType::kF32);
    EXPECT_FALSE(f->SharesStorageWith(*raw));
    for (int64_t i = 0; i < raw->numel(); ++i) {
      const int64_t b = BitsAt(*raw, i);
      double want;
      switch (raw->dtype()) {
        case DType::kBF16: {
          const uint32_t u = static_cast<uint32_t>(b) << 16;
          float v;
          std::memcpy(&v, &u, 4);
          want = v;
          break;
        }
        case DType::kF16:
          want = HalfBitsToDouble(static_cast<uint16_t>(b));
          break;
        default:
          want = static_cast<float>(b);
      }
      ASSERT_EQ(f->data<float>()[i], static_cast<float>(want)) << i;
    }
  }
  // Same dtype: the view itself.
  auto same = file->Load("f32_2x3", DType::kF32);
  ASSERT_TRUE(same.ok());
  EXPECT_TRUE(same->storage() == file->mapping());
  // f32 -> bf16 rounds to nearest even.
  auto bf = file->Load("f32_2x3", DType::kBF16);
  auto src = file->Load("f32_2x3");
  ASSERT_TRUE(bf.ok() && src.ok());
  for (int i = 0; i < 6; ++i) {
    uint32_t u;
    std::memcpy(&u, &src->data<float>()[i], 4);
    const uint32_t rounded = (u + 0x7fff + ((u >> 16) & 1)) >> 16;
    EXPECT_EQ(bf->data<bf16>()[i].bits, rounded);
  }
  auto all = file->LoadAll(DType::kF32);
  ASSERT_TRUE(all.ok()) << all.status();
  EXPECT_EQ(all->size(), file->Names().size());
  for (const auto& [name, t] : *all) EXPECT_EQ(t.dtype(), DType::kF32) << name;
}

TEST(SafetensorsTest, LoadIntoFillsExistingTensors) {
  auto file = SafetensorsFile::Open(absl::StrCat(kAssets, "/dtypes.safetensors"));
  ASSERT_TRUE(file.ok());
  // Contiguous f32 destination from bf16.
  Tensor dst = ValueOrDie(Tensor::Zeros({5, 7}, DType::kF32));
  ASSERT_TRUE(file->LoadInto("bf16_5x7", dst).ok());
  Tensor want = ValueOrDie(file->Load("bf16_5x7", DType::kF32));
  for (int i = 0; i < 35; ++i) EXPECT_EQ(dst.data<float>()[i], want.data<float>()[i]);
  // A non-contiguous destination (the transpose of a [7, 5] tensor).
  Tensor base = ValueOrDie(Tensor::Zeros({7, 5}, DType::kF32));
  Tensor view = ValueOrDie(base.Transpose(0, 1));
  ASSERT_TRUE(file->LoadInto("bf16_5x7", view).ok());
  for (int r = 0; r < 5; ++r) {
    for (int c = 0; c < 7; ++c) EXPECT_EQ(base.data<float>()[c * 5 + r], want.data<float>()[r * 7 + c]);
  }
  Tensor wrong = ValueOrDie(Tensor::Zeros({7, 5}, DType::kF32));
  auto s = file->LoadInto("bf16_5x7", wrong);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("the file has shape [5, 7] but the destination is [7, 5]"));
  Tensor undefined;
  EXPECT_FALSE(file->LoadInto("bf16_5x7", undefined).ok());
}

// Random tensors of every dtype, odd shapes, a scalar, an empty and a non-contiguous view.
StateDict RandomStateDict(Generator& gen) {
  StateDict sd;
  sd["a.f32"] = ValueOrDie(RandomNormal({3, 7}, DType::kF32, gen));
  sd["b.bf16"] = ValueOrDie(RandomNormal({5, 1, 3}, DType::kBF16, gen));
  sd["c.f16"] = ValueOrDie(RandomNormal({11}, DType::kF16, gen));
  sd["scalar"] = ValueOrDie(RandomNormal({}, DType::kF32, gen));
  sd["empty"] = ValueOrDie(Tensor::Empty({0, 3}, DType::kBF16));
  Tensor wide = ValueOrDie(RandomNormal({4, 6}, DType::kF32, gen));
  sd["transposed"] = ValueOrDie(wide.Transpose(0, 1));  // non-contiguous
  std::vector<int64_t> i64(9);
  for (auto& v : i64) v = static_cast<int64_t>(gen.NextUint64());
  sd["ints.i64"] = ValueOrDie(Tensor::FromVector(i64, {9}));
  std::vector<int32_t> i32(5);
  for (auto& v : i32) v = static_cast<int32_t>(gen.NextUint32());
  sd["ints.i32"] = ValueOrDie(Tensor::FromVector(i32, {5}));
  Tensor b = ValueOrDie(Tensor::Empty({7}, DType::kBool));
  for (int i = 0; i < 7; ++i) static_cast<uint8_t*>(b.raw_data())[i] = gen.NextUint32() & 1;
  sd["mask"] = b;
  return sd;
}

void ExpectSameBits(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.dtype(), want.dtype());
  ASSERT_EQ(got.shape(), want.shape());
  Tensor w = ValueOrDie(want.Contiguous());
  for (int64_t i = 0; i < w.numel(); ++i) ASSERT_EQ(BitsAt(got, i), BitsAt(w, i)) << i;
}

TEST(SafetensorsTest, RoundTripIsExactAndWellFormed) {
  Generator gen(17);
  const StateDict sd = RandomStateDict(gen);
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"step", "12"}};
  const std::string dir = TestDir("roundtrip");
  const std::string path = dir + "/model.safetensors";
  ASSERT_TRUE(SaveSafetensors(path, sd, meta).ok());
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->metadata(), meta);
  ASSERT_EQ(file->Names().size(), sd.size());
  for (const auto& [name, want] : sd) {
    SCOPED_TRACE(name);
    auto got = file->Load(name);
    ASSERT_TRUE(got.ok()) << got.status();
    ExpectSameBits(*got, want);
    // The writer aligns every tensor, so every load is a view.
    EXPECT_TRUE(got->storage() == file->mapping());
  }
  // Header: padded with spaces to 8 bytes, keys sorted, offsets contiguous from 0.
  const std::string bytes = ReadAll(path);
  EXPECT_EQ(file->header().data_start % 8, 0u);
  const std::string header = bytes.substr(8, file->header().data_start - 8);
  EXPECT_EQ(header.find_last_not_of(' ') + 1, header.find_last_of('}') + 1);
  const Json j = Json::parse(header);
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  for (const auto& [name, e] : file->entries()) spans.emplace_back(e.begin, e.end);
  std::sort(spans.begin(), spans.end());
  uint64_t pos = 0;
  for (const auto& [b, e] : spans) {
    EXPECT_EQ(b, pos);
    pos = e;
  }
  EXPECT_EQ(pos, file->header().data_size);
  size_t prev = 0;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const size_t at = header.find(absl::StrCat("\"", it.key(), "\":"));
    EXPECT_GE(at, prev) << it.key();
    prev = at;
  }
  // SerializeSafetensors writes the same bytes.
  auto mem = SerializeSafetensors(sd, meta);
  ASSERT_TRUE(mem.ok());
  EXPECT_EQ(*mem, bytes);
}

TEST(SafetensorsTest, SaveIsAtomicAndReplaces) {
  const std::string dir = TestDir("atomic");
  const std::string path = dir + "/w.safetensors";
  Generator gen(3);
  StateDict one = {{"x", ValueOrDie(RandomNormal({4}, DType::kF32, gen))}};
  StateDict two = {{"y", ValueOrDie(RandomNormal({2, 2}, DType::kBF16, gen))}};
  ASSERT_TRUE(SaveSafetensors(path, one).ok());
  ASSERT_TRUE(SaveSafetensors(path, two).ok());
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(file->Names(), std::vector<std::string>{"y"});
  // No temporary files left behind.
  DIR* d = opendir(dir.c_str());
  ASSERT_NE(d, nullptr);
  int entries = 0;
  while (dirent* e = readdir(d)) {
    if (std::strcmp(e->d_name, ".") && std::strcmp(e->d_name, "..")) {
      ++entries;
      EXPECT_STREQ(e->d_name, "w.safetensors");
    }
  }
  closedir(d);
  EXPECT_EQ(entries, 1);
  // A directory that does not exist: an error naming the path.
  auto bad = SaveSafetensors(dir + "/no/such/dir/w.safetensors", one);
  EXPECT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.message()), HasSubstr("no/such/dir"));
}

TEST(SafetensorsTest, WriterRejectsBadInput) {
  Generator gen(5);
  Tensor ok = ValueOrDie(RandomNormal({2}, DType::kF32, gen));
  EXPECT_FALSE(SerializeSafetensors({{"__metadata__", ok}}).ok());
  EXPECT_FALSE(SerializeSafetensors({{"undefined", Tensor()}}).ok());
  Tensor meta = ValueOrDie(Tensor::Empty({2}, DType::kF32, Device::Meta()));
  auto s = SerializeSafetensors({{"m", meta}});
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("'m'"));
  EXPECT_FALSE(SerializeSafetensors({{std::string("bad\xff"), ok}}).ok());  // not UTF-8
}

TEST(SafetensorsTest, MisalignedTensorIsCopied) {
  // Header of 9 bytes puts the data at file offset 17: an F32 there is misaligned.
  const std::string header = R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  std::string padded = header + std::string((9 - (8 + header.size()) % 4) % 4 + 1, ' ');
  ASSERT_NE((8 + padded.size()) % 4, 0u);
  const float vals[2] = {1.5f, -2.25f};
  const std::string path = TestDir("misaligned") + "/m.safetensors";
  WriteAll(path, Image(padded, std::string(reinterpret_cast<const char*>(vals), 8)));
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  auto t = file->Load("x");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_FALSE(t->storage() == file->mapping());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t->raw_data()) % 4, 0u);
  EXPECT_EQ(t->data<float>()[0], 1.5f);
  EXPECT_EQ(t->data<float>()[1], -2.25f);
  auto h = file->Load("x", DType::kBF16);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(Bf16ToFloat(h->data<bf16>()[1]), -2.25f);
}

struct BadCase {
  const char* name;
  std::string image;
  const char* expect;  // substring of the message
  absl::StatusCode code = absl::StatusCode::kInvalidArgument;
};

std::vector<BadCase> BadCases() {
  const std::string d8(8, 'x'), d16(16, 'x');
  auto one = [](const std::string& entry) { return absl::StrCat(R"({"t":)", entry, "}"); };
  return {
      {"empty", "", "too short"},
      {"seven_bytes", std::string(7, '\0'), "too short"},
      {"length_past_end", Le64(100) + "{}", "runs past the end"},
      {"length_huge", Le64(~uint64_t{0}) + "{}", "runs past the end"},
      {"empty_header", Image("", ""), "not valid JSON"},
      {"invalid_json", Image("{\"t\":", d8), "not valid JSON"},
      {"array", Image("[1, 2]", ""), "not an object"},
      {"number", Image("42", ""), "not an object"},
      {"string", Image("\"hi\"", ""), "not an object"},
      {"entry_not_object", Image(one("[1]"), ""), "tensor 't': entry is a JSON array"},
      {"missing_dtype", Image(one(R"({"shape":[2],"data_offsets":[0,8]})"), d8),
       "tensor 't': missing field \"dtype\""},
      {"missing_shape", Image(one(R"({"dtype":"F32","data_offsets":[0,8]})"), d8),
       "tensor 't': missing field \"shape\""},
      {"missing_offsets", Image(one(R"({"dtype":"F32","shape":[2]})"), d8),
       "tensor 't': missing field \"data_offsets\""},
      {"dtype_not_string", Image(one(R"({"dtype":4,"shape":[2],"data_offsets":[0,8]})"), d8),
       "\"dtype\" is a JSON number"},
      {"unknown_dtype", Image(one(R"({"dtype":"F33","shape":[2],"data_offsets":[0,8]})"), d8),
       "tensor 't': unknown dtype \"F33\""},
      {"unsupported_dtype",
       Image(one(R"({"dtype":"F8_E4M3","shape":[8],"data_offsets":[0,8]})"), d8),
       "dtype F8_E4M3 is not supported", absl::StatusCode::kUnimplemented},
      {"negative_dim", Image(one(R"({"dtype":"F32","shape":[-2],"data_offsets":[0,8]})"), d8),
       "shape entry -2"},
      {"float_dim", Image(one(R"({"dtype":"F32","shape":[2.0],"data_offsets":[0,8]})"), d8),
       "shape entry 2.0"},
      {"shape_not_array", Image(one(R"({"dtype":"F32","shape":2,"data_offsets":[0,8]})"), d8),
       "\"shape\" is a JSON number"},
      {"too_many_dims",
       Image(one(R"({"dtype":"F32","shape":[1,1,1,1,1,1,1,1,2],"data_offsets":[0,8]})"), d8),
       "9 dims"},
      {"shape_overflow",
       Image(one(R"({"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]})"),
             d8),
       "too large"},
      {"offsets_one", Image(one(R"({"dtype":"F32","shape":[2],"data_offsets":[8]})"), d8),
       "must be [begin, end]"},
      {"offsets_negative",
       Image(one(R"({"dtype":"F32","shape":[2],"data_offsets":[-8,0]})"), d8),
       "non-negative integers"},
      {"begin_after_end", Image(one(R"({"dtype":"F32","shape":[2],"data_offsets":[8,0]})"), d8),
       "begin is past end"},
      {"offsets_out_of_range",
       Image(one(R"({"dtype":"F32","shape":[2],"data_offsets":[8,16]})"), d8),
       "run past the data section (8 bytes)"},
      {"bytes_mismatch", Image(one(R"({"dtype":"F32","shape":[3],"data_offsets":[0,8]})"), d16),
       "span 8 bytes but shape [3] of F32 needs 12"},
      {"overlap",
       Image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
             d16),
       "tensors 'a' [0, 8) and 'b' [4, 12) overlap"},
      {"duplicate",
       Image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
             R"("a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
             d16),
       "names 'a' twice"},
      {"metadata_not_object", Image(R"({"__metadata__":[1]})", ""),
       "\"__metadata__\" is a JSON array"},
      {"metadata_value_not_string", Image(R"({"__metadata__":{"k":1}})", ""),
       "\"__metadata__\" value of 'k' is a JSON number"},
  };
}

TEST(SafetensorsTest, BadFilesGiveStatusNamingFileAndProblem) {
  const std::string dir = TestDir("bad");
  for (const BadCase& c : BadCases()) {
    SCOPED_TRACE(c.name);
    const std::string path = absl::StrCat(dir, "/", c.name, ".safetensors");
    WriteAll(path, c.image);
    auto file = SafetensorsFile::Open(path);
    ASSERT_FALSE(file.ok());
    EXPECT_EQ(file.status().code(), c.code) << file.status();
    EXPECT_THAT(std::string(file.status().message()), HasSubstr(path));
    EXPECT_THAT(std::string(file.status().message()), HasSubstr(c.expect));
    // The in-memory parser agrees.
    auto h = ParseSafetensors(c.image, "mem");
    ASSERT_FALSE(h.ok());
    EXPECT_THAT(std::string(h.status().message()), HasSubstr(c.expect));
  }
}

TEST(SafetensorsTest, EveryTruncationOfAValidFileFails) {
  Generator gen(9);
  auto bytes = SerializeSafetensors(RandomStateDict(gen), {{"format", "pt"}});
  ASSERT_TRUE(bytes.ok());
  ASSERT_TRUE(ParseSafetensors(*bytes).ok());
  int failures = 0;
  for (size_t n = 0; n < bytes->size(); ++n) {
    auto h = ParseSafetensors(absl::string_view(*bytes).substr(0, n), "trunc");
    if (!h.ok()) ++failures;
  }
  EXPECT_EQ(failures, static_cast<int>(bytes->size()));
  // And on disk, for a few lengths.
  const std::string dir = TestDir("truncated");
  for (size_t n : {size_t{0}, size_t{5}, size_t{8}, size_t{40}, bytes->size() - 1}) {
    const std::string path = absl::StrCat(dir, "/t", n);
    WriteAll(path, bytes->substr(0, n));
    auto f = SafetensorsFile::Open(path);
    ASSERT_FALSE(f.ok()) << n;
    EXPECT_THAT(std::string(f.status().message()), HasSubstr(path));
  }
}

TEST(SafetensorsTest, HeaderOverLimitIsRejected) {
  std::string image = Le64(kSafetensorsMaxHeaderBytes + 1);
  image.resize(8 + kSafetensorsMaxHeaderBytes + 1, ' ');
  auto h = ParseSafetensors(image, "big");
  ASSERT_FALSE(h.ok());
  EXPECT_THAT(std::string(h.status().message()), HasSubstr("exceeds the limit"));
}

TEST(SafetensorsTest, OpenErrors) {
  auto missing = SafetensorsFile::Open("/no/such/file.safetensors");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("/no/such/file.safetensors"));
  auto dir = SafetensorsFile::Open(TestDir("isdir"));
  EXPECT_FALSE(dir.ok());
  auto file = SafetensorsFile::Open(absl::StrCat(kAssets, "/dtypes.safetensors"));
  ASSERT_TRUE(file.ok());
  auto nope = file->Load("nope");
  EXPECT_EQ(nope.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(nope.status().message()), HasSubstr("'nope'"));
}

TEST(SafetensorsTest, DTypeNames) {
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16, DType::kI64, DType::kI32,
                  DType::kBool}) {
    auto back = SafetensorsDTypeFromName(SafetensorsDTypeName(t));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, t);
  }
  EXPECT_EQ(SafetensorsDTypeFromName("F64").status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(SafetensorsDTypeFromName("f32").status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace cctune
