#include "modules/parameters.h"

#include <cstdlib>
#include <fstream>

#include "checkpoint/mapped_file.h"

#include <cmath>
#include <string>
#include <vector>

#include "core/device_interface.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cctune {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class Toy : public Module {
 public:
  explicit Toy(int64_t n = 3) {
    RegisterParameter("w", {n, 5}, ParameterInit::Normal(0.5));
    RegisterParameter("norm", {7}, ParameterInit::Ones());
    RegisterParameter("b", {n}, ParameterInit::Zeros());
    RegisterParameter("f32_only", {2, 3}, ParameterInit::Uniform(0.25), DType::kF32);
  }
};

class Nested : public Module {
 public:
  Nested() : first_(new Toy(3)), second_(new Toy(4)) {
    RegisterModule("layers.0", first_.get());
    RegisterModule("layers.1", second_.get());
  }
  std::unique_ptr<Toy> first_, second_;
};

StateDict RandomStateDict(const ParameterArena& arena, uint64_t seed) {
  Generator gen(seed);
  StateDict sd;
  for (const auto& [name, t] : arena.named_tensors()) {
    sd[name] = ValueOrDie(RandomNormal(t.shape(), DType::kF32, gen));
  }
  return sd;
}

TEST(ParameterLayoutTest, AlignsEveryParameterAndGroupsByDtype) {
  auto layout = ValueOrDie(ParameterLayout::Create({{"a", {3}, DType::kF32, {}},
                                                    {"b", {5}, DType::kBF16, {}},
                                                    {"c", {2, 2}, DType::kF32, {}},
                                                    {"d", {17}, DType::kBF16, {}}}));
  ASSERT_EQ(layout.buffers().size(), 2u);
  EXPECT_EQ(layout.buffers()[0].dtype, DType::kF32);
  EXPECT_EQ(layout.buffers()[1].dtype, DType::kBF16);
  // 32-element alignment whatever the dtype (128 bytes for f32, 64 for bf16).
  EXPECT_EQ(layout.Find("a")->offset, 0);
  EXPECT_EQ(layout.Find("c")->offset, 32);
  EXPECT_EQ(layout.Find("b")->offset, 0);
  EXPECT_EQ(layout.Find("d")->offset, 32);
  EXPECT_EQ(layout.buffers()[0].numel, 36);
  EXPECT_EQ(layout.buffers()[1].numel, 49);
  EXPECT_EQ(layout.NumParameters(), 3 + 5 + 4 + 17);
  EXPECT_EQ(layout.Bytes(), 36u * 4 + 49u * 2);
  EXPECT_EQ(layout.Find("zzz"), nullptr);

  ParameterLayout grads = layout.WithDType(DType::kF32);
  ASSERT_EQ(grads.buffers().size(), 1u);
  EXPECT_EQ(grads.entries().size(), 4u);
  EXPECT_EQ(grads.entries()[1].spec.name, "b");
  EXPECT_EQ(grads.NumParameters(), layout.NumParameters());
}

TEST(ParameterLayoutTest, RejectsDuplicateOrEmptyNames) {
  auto dup = ParameterLayout::Create({{"x", {1}, DType::kF32, {}}, {"x", {2}, DType::kF32, {}}});
  ASSERT_FALSE(dup.ok());
  EXPECT_THAT(std::string(dup.status().message()), HasSubstr("'x' is declared twice"));
  auto empty = ParameterLayout::Create({{"", {4, 2}, DType::kF32, {}}});
  ASSERT_FALSE(empty.ok());
  EXPECT_THAT(std::string(empty.status().message()), HasSubstr("[4, 2]"));
}

TEST(ParameterArenaTest, BindsNamedViewsIntoOneBufferPerDtype) {
  Nested model;
  auto arena = ValueOrDie(ParameterArena::Create(model, DType::kBF16, Device::Cpu()));
  ASSERT_EQ(arena.buffers().size(), 2u);  // bf16 (default) and the pinned f32
  EXPECT_EQ(arena.buffers()[0].dtype(), DType::kBF16);
  EXPECT_EQ(arena.buffers()[1].dtype(), DType::kF32);
  EXPECT_TRUE(model.IsMaterialized());
  EXPECT_EQ(arena.NumParameters(), model.NumParameters());
  std::vector<std::string> names;
  for (const auto& [name, t] : arena.named_tensors()) names.push_back(name);
  EXPECT_THAT(names, ElementsAre("layers.0.w", "layers.0.norm", "layers.0.b", "layers.0.f32_only",
                                 "layers.1.w", "layers.1.norm", "layers.1.b", "layers.1.f32_only"));
  // Each module parameter is the arena's view, at its layout offset inside the buffer.
  model.ForEachParameter(Module::ParameterFn([&](const std::string& name, Parameter& p) {
    const ParameterLayout::Entry* e = arena.layout().Find(name);
    ASSERT_NE(e, nullptr) << name;
    const Tensor& buf = arena.buffers()[e->buffer];
    EXPECT_TRUE(p.value.SharesStorageWith(buf)) << name;
    EXPECT_TRUE(p.value.is_contiguous()) << name;
    EXPECT_EQ(static_cast<const char*>(p.value.raw_data()),
              static_cast<const char*>(buf.raw_data()) + e->offset * DTypeSize(e->spec.dtype))
        << name;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p.value.raw_data()) % kParameterAlignmentBytes, 0u);
    EXPECT_EQ(p.value.dtype(),
              name.find("f32_only") != std::string::npos ? DType::kF32 : DType::kBF16);
  }));
  // Writing through the arena is visible through the module.
  Tensor w = ValueOrDie(arena.Get("layers.1.w"));
  ASSERT_TRUE(w.CopyFrom(ValueOrDie(Tensor::Full({4, 5}, 2.5, DType::kF32))).ok());
  EXPECT_EQ(ValueOrDie(model.second_->NamedParameters()[0].second->value.ToFloatVector())[7], 2.5f);
  EXPECT_FALSE(arena.Get("layers.2.w").ok());
}

TEST(ParameterArenaTest, MetaDeviceAllocatesNothing) {
  class Huge : public Module {
   public:
    Huge() {
      RegisterParameter("embed", {1 << 20, 1 << 14});  // 17 billion elements
      RegisterParameter("norm", {1 << 14}, ParameterInit::Ones());
    }
  } huge;
  const MemoryStats before = GetMemoryStats(Device::Cpu());
  auto arena = ValueOrDie(ParameterArena::Create(huge, DType::kBF16, Device::Meta()));
  const MemoryStats after = GetMemoryStats(Device::Cpu());
  EXPECT_EQ(after.current_bytes, before.current_bytes);
  EXPECT_EQ(after.num_allocations, before.num_allocations);
  EXPECT_EQ(arena.NumParameters(), (int64_t{1} << 34) + (1 << 14));
  EXPECT_GE(arena.Bytes(), static_cast<size_t>(arena.NumParameters()) * 2);
  EXPECT_TRUE(huge.IsMaterialized());
  EXPECT_TRUE(ValueOrDie(arena.Get("embed")).device().is_meta());
  Generator gen(1);
  EXPECT_TRUE(arena.InitializeRandom(gen).ok());
  EXPECT_TRUE(arena.Zero().ok());
}

TEST(ParameterArenaTest, LoadStateDictConvertsDtypes) {
  Toy model;
  auto arena = ValueOrDie(ParameterArena::Create(model, DType::kBF16, Device::Cpu()));
  StateDict sd = RandomStateDict(arena, 7);
  auto report = ValueOrDie(arena.LoadStateDict(sd));
  EXPECT_EQ(report.loaded.size(), 4u);
  EXPECT_TRUE(report.missing.empty());
  EXPECT_TRUE(report.unexpected.empty());
  for (const auto& [name, t] : arena.named_tensors()) {
    const auto src = ValueOrDie(sd.at(name).ToFloatVector());
    const auto got = ValueOrDie(t.ToFloatVector());
    ASSERT_EQ(src.size(), got.size());
    for (size_t i = 0; i < src.size(); ++i) {
      const float want = t.dtype() == DType::kBF16 ? Bf16ToFloat(FloatToBf16(src[i])) : src[i];
      EXPECT_EQ(got[i], want) << name << "[" << i << "]";
    }
  }
}

TEST(ParameterArenaTest, LoadStateDictReportsEveryProblemByNameAndWritesNothing) {
  Toy model;
  auto arena = ValueOrDie(ParameterArena::Create(model, DType::kF32, Device::Cpu()));
  ASSERT_TRUE(arena.LoadStateDict(RandomStateDict(arena, 1)).ok());
  const auto before = ValueOrDie(ValueOrDie(arena.Get("norm")).ToFloatVector());

  StateDict sd = RandomStateDict(arena, 2);
  sd.erase("b");                                                     // missing
  sd["extra.weight"] = ValueOrDie(Tensor::Zeros({9}, DType::kF32));  // unexpected
  sd["w"] = ValueOrDie(Tensor::Zeros({5, 3}, DType::kF32));          // transposed shape
  auto result = arena.LoadStateDict(sd);
  ASSERT_FALSE(result.ok());
  const std::string msg(result.status().message());
  EXPECT_THAT(msg, HasSubstr("1 missing [b [3]]"));
  EXPECT_THAT(msg, HasSubstr("1 unexpected [extra.weight [9]]"));
  EXPECT_THAT(msg, HasSubstr("w: checkpoint [5, 3] vs model [3, 5]"));
  // "norm" was valid but nothing may be written when anything is wrong.
  EXPECT_EQ(ValueOrDie(ValueOrDie(arena.Get("norm")).ToFloatVector()), before);
}

TEST(ParameterArenaTest, NonStrictLoadReportsNamesButStillRejectsShapes) {
  Toy model;
  auto arena = ValueOrDie(ParameterArena::Create(model, DType::kF32, Device::Cpu()));
  StateDict sd = RandomStateDict(arena, 3);
  sd.erase("norm");
  sd["output.weight"] = ValueOrDie(Tensor::Zeros({2}, DType::kF32));
  auto report = ValueOrDie(arena.LoadStateDict(sd, /*strict=*/false));
  EXPECT_THAT(report.missing, ElementsAre("norm"));
  EXPECT_THAT(report.unexpected, ElementsAre("output.weight"));
  EXPECT_EQ(report.loaded.size(), 3u);
  EXPECT_EQ(ValueOrDie(ValueOrDie(arena.Get("w")).ToFloatVector()),
            ValueOrDie(sd.at("w").ToFloatVector()));
  sd["b"] = ValueOrDie(Tensor::Zeros({4}, DType::kF32));
  auto bad = arena.LoadStateDict(sd, /*strict=*/false);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("b: checkpoint [4] vs model [3]"));
}

TEST(ParameterArenaTest, LoadAcceptsNonContiguousSources) {
  Toy model;
  auto arena = ValueOrDie(ParameterArena::Create(model, DType::kF32, Device::Cpu()));
  StateDict sd = RandomStateDict(arena, 4);
  Generator gen(5);
  Tensor wt = ValueOrDie(RandomNormal({5, 3}, DType::kF32, gen));
  sd["w"] = ValueOrDie(wt.Transpose(0, 1));  // [3, 5] view with strides (1, 3)
  ASSERT_TRUE(arena.LoadStateDict(sd).ok());
  const auto got = ValueOrDie(ValueOrDie(arena.Get("w")).ToFloatVector());
  const auto src = ValueOrDie(wt.ToFloatVector());
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 5; ++j) EXPECT_EQ(got[i * 5 + j], src[j * 3 + i]);
  }
}

TEST(ParameterArenaTest, MetaArenaChecksCheckpointShapes) {
  Toy model;
  auto arena = ValueOrDie(ParameterArena::Create(model, DType::kBF16, Device::Meta()));
  StateDict sd;
  for (const auto& [name, t] : arena.named_tensors()) {
    sd[name] = ValueOrDie(Tensor::Empty(t.shape(), DType::kBF16, Device::Meta()));
  }
  EXPECT_TRUE(arena.LoadStateDict(sd).ok());
  sd["norm"] = ValueOrDie(Tensor::Empty({8}, DType::kBF16, Device::Meta()));
  auto bad = arena.LoadStateDict(sd);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("norm: checkpoint [8] vs model [7]"));
}

TEST(ParameterArenaTest, ExportStateDictGivesViewsByName) {
  Nested model;
  auto arena = ValueOrDie(ParameterArena::Create(model, DType::kF32, Device::Cpu()));
  StateDict sd = arena.ExportStateDict();
  ASSERT_EQ(sd.size(), 8u);
  EXPECT_EQ(sd.begin()->first, "layers.0.b");  // sorted
  EXPECT_TRUE(sd.at("layers.1.w").SharesStorageWith(arena.buffers()[0]));
  // A round trip through another arena reproduces the values.
  Generator gen(11);
  ASSERT_TRUE(arena.InitializeRandom(gen).ok());
  Nested copy;
  auto arena2 = ValueOrDie(ParameterArena::Create(copy, DType::kF32, Device::Cpu()));
  ASSERT_TRUE(arena2.LoadStateDict(arena.ExportStateDict()).ok());
  EXPECT_EQ(ValueOrDie(arena2.buffers()[0].ToFloatVector()),
            ValueOrDie(arena.buffers()[0].ToFloatVector()));
}

TEST(ParameterLayoutTest, WithDTypeKeepsElementOffsets) {
  // Odd sizes so that a dtype-dependent padding would shift the offsets.
  std::vector<ParameterSpec> specs;
  const int64_t sizes[] = {1, 17, 33, 63, 64, 65, 129, 5};
  for (int i = 0; i < 8; ++i) {
    specs.push_back({absl::StrCat("p", i), {sizes[i]}, DType::kBF16, {}});
  }
  auto bf16 = ValueOrDie(ParameterLayout::Create(specs));
  for (DType dt : {DType::kF32, DType::kBF16}) {
    ParameterLayout other = bf16.WithDType(dt);
    ASSERT_EQ(other.entries().size(), bf16.entries().size());
    ASSERT_EQ(other.buffers().size(), 1u);
    EXPECT_EQ(other.buffers()[0].numel, bf16.buffers()[0].numel);
    int64_t expected_offset = 0;
    for (size_t i = 0; i < bf16.entries().size(); ++i) {
      EXPECT_EQ(other.entries()[i].offset, bf16.entries()[i].offset) << i;
      // Independent reference: round the running end up to 32 elements.
      EXPECT_EQ(bf16.entries()[i].offset, expected_offset) << i;
      expected_offset = (expected_offset + sizes[i] + 31) / 32 * 32;
      EXPECT_EQ(other.entries()[i].offset * static_cast<int64_t>(DTypeSize(dt)) % 64, 0);
    }
  }
}

TEST(ParameterArenaTest, GradientArenaSharesTheLayout) {
  Nested model;
  auto params = ValueOrDie(ParameterArena::Create(model, DType::kBF16, Device::Cpu()));
  auto grads =
      ValueOrDie(ParameterArena::Allocate(params.layout().WithDType(DType::kF32), Device::Cpu()));
  ASSERT_EQ(grads.buffers().size(), 1u);
  EXPECT_EQ(grads.NumParameters(), params.NumParameters());
  ASSERT_EQ(grads.named_tensors().size(), params.named_tensors().size());
  for (size_t i = 0; i < grads.named_tensors().size(); ++i) {
    EXPECT_EQ(grads.named_tensors()[i].first, params.named_tensors()[i].first);
    EXPECT_EQ(grads.named_tensors()[i].second.shape(), params.named_tensors()[i].second.shape());
    EXPECT_EQ(grads.named_tensors()[i].second.dtype(), DType::kF32);
    EXPECT_FALSE(grads.named_tensors()[i].second.SharesStorageWith(params.buffers()[0]));
  }
  for (float v : ValueOrDie(grads.buffers()[0].ToFloatVector())) ASSERT_EQ(v, 0.f);
}

TEST(ParameterArenaTest, BindRejectsAnotherModelAndLeavesItUntouched) {
  Toy small(3), big(4);
  auto arena = ValueOrDie(ParameterArena::Create(small, DType::kF32, Device::Cpu()));
  absl::Status s = arena.Bind(big);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("'w' [4, 5]"));
  EXPECT_FALSE(big.IsMaterialized());
  Toy same(3);
  EXPECT_TRUE(arena.Bind(same).ok());
  EXPECT_TRUE(same.IsMaterialized());
}

TEST(ParameterArenaTest, InitializeRandomFollowsEachInitAndIsDeterministic) {
  class Wide : public Module {
   public:
    Wide() {
      RegisterParameter("normal", {200, 100}, ParameterInit::Normal(0.5));
      RegisterParameter("uniform", {100, 100}, ParameterInit::Uniform(0.25));
      RegisterParameter("ones", {33}, ParameterInit::Ones());
      RegisterParameter("zeros", {31}, ParameterInit::Zeros());
    }
  } a, b;
  auto arena_a = ValueOrDie(ParameterArena::Create(a, DType::kF32, Device::Cpu()));
  auto arena_b = ValueOrDie(ParameterArena::Create(b, DType::kF32, Device::Cpu()));
  Generator g1(42), g2(42);
  ASSERT_TRUE(arena_a.InitializeRandom(g1).ok());
  ASSERT_TRUE(arena_b.InitializeRandom(g2).ok());
  EXPECT_EQ(ValueOrDie(arena_a.buffers()[0].ToFloatVector()),
            ValueOrDie(arena_b.buffers()[0].ToFloatVector()));
  const auto normal = ValueOrDie(ValueOrDie(arena_a.Get("normal")).ToDoubleVector());
  double sum = 0, sq = 0;
  for (double v : normal) {
    sum += v;
    sq += v * v;
  }
  const double mean = sum / normal.size(), std = std::sqrt(sq / normal.size() - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.02);
  EXPECT_NEAR(std, 0.5, 0.02);
  double lo = 1, hi = -1;
  for (double v : ValueOrDie(ValueOrDie(arena_a.Get("uniform")).ToDoubleVector())) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  EXPECT_GE(lo, -0.25);
  EXPECT_LT(hi, 0.25);
  EXPECT_LT(lo, -0.24);
  EXPECT_GT(hi, 0.24);
  for (double v : ValueOrDie(ValueOrDie(arena_a.Get("ones")).ToDoubleVector())) EXPECT_EQ(v, 1.0);
  for (double v : ValueOrDie(ValueOrDie(arena_a.Get("zeros")).ToDoubleVector())) EXPECT_EQ(v, 0.0);
}


// A bf16 state dict whose tensors all view ONE storage (as a mapped checkpoint's do).
StateDict PackedBf16StateDict(const ParameterArena& like, uint64_t seed,
                              std::shared_ptr<Storage>* storage) {
  int64_t total = 0;
  for (const auto& [name, t] : like.named_tensors()) total += t.numel();
  Generator gen(seed);
  Tensor flat = ValueOrDie(RandomNormal({total}, DType::kBF16, gen));
  *storage = flat.storage();
  StateDict sd;
  int64_t offset = flat.offset();
  for (const auto& [name, t] : like.named_tensors()) {
    sd[name] = ValueOrDie(Tensor::FromStorage(flat.storage(), t.shape(), DType::kBF16, offset));
    offset += t.numel();
  }
  return sd;
}

TEST(ParameterArenaTest, CreateViewingAliasesSameDtypeTensorsAndCopiesTheRest) {
  Toy shape_source;
  auto like = ValueOrDie(ParameterArena::Create(shape_source, DType::kBF16, Device::Cpu()));
  std::shared_ptr<Storage> storage;
  const StateDict sd = PackedBf16StateDict(like, 3, &storage);
  const char* begin = static_cast<const char*>(storage->data());
  const char* end = begin + storage->bytes();

  Toy model;
  const int64_t before = GetMemoryStats(Device::Cpu()).current_bytes;
  auto arena = ValueOrDie(ParameterArena::CreateViewing(model, sd, DType::kBF16, Device::Cpu()));
  const int64_t owned = GetMemoryStats(Device::Cpu()).current_bytes - before;
  size_t viewed = 0;
  for (const auto& [name, t] : arena.named_tensors()) {
    const char* p = static_cast<const char*>(t.raw_data());
    if (name == "f32_only") {  // declared f32: converted into an owned buffer
      EXPECT_EQ(t.dtype(), DType::kF32);
      EXPECT_FALSE(p >= begin && p < end) << name;
    } else {
      EXPECT_TRUE(p >= begin && p + t.nbytes() <= end) << name << " is not a view";
      EXPECT_EQ(p, static_cast<const char*>(sd.at(name).raw_data())) << name;
      viewed += t.nbytes();
    }
    // Bound into the module, and holding the state dict's values.
    EXPECT_EQ(ValueOrDie(t.ToFloatVector()), ValueOrDie(sd.at(name).ToFloatVector())) << name;
  }
  EXPECT_EQ(arena.viewed_bytes(), viewed);
  EXPECT_EQ(viewed, (3 * 5 + 7 + 3) * sizeof(uint16_t));
  // Only the copied parameter's buffer (2x3 f32, aligned) was allocated.
  ASSERT_EQ(arena.buffers().size(), 1u);
  EXPECT_EQ(arena.buffers()[0].numel(), 6);
  EXPECT_EQ(owned, static_cast<int64_t>(6 * sizeof(float)));
  int bound = 0;
  static_cast<const Module&>(model).ForEachParameter(Module::ConstParameterFn([&](const std::string& name, const Parameter& p) {
    EXPECT_EQ(p.value.raw_data(), ValueOrDie(arena.Get(name)).raw_data()) << name;
    ++bound;
  }));
  EXPECT_EQ(bound, 4);
  // It views memory it does not own: no writes through the arena's whole-arena passes.
  Generator gen(1);
  EXPECT_EQ(arena.InitializeRandom(gen).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(arena.Zero().message()), HasSubstr("CreateViewing"));
}

TEST(ParameterArenaTest, CreateViewingCanCopyMappedFilesAndViewTheRest) {
  Toy shape_source;
  auto like = ValueOrDie(ParameterArena::Create(shape_source, DType::kBF16, Device::Cpu()));
  std::shared_ptr<Storage> storage;
  const StateDict in_memory = PackedBf16StateDict(like, 4, &storage);
  // The same tensors from a mapped file.
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(tmp ? tmp : "/tmp") + "/parameters_test_mapped";
  std::ofstream(path, std::ios::binary)
      .write(static_cast<const char*>(storage->data()), static_cast<std::streamsize>(storage->bytes()));
  const std::shared_ptr<Storage> file = ValueOrDie(MapFile(path));
  ASSERT_TRUE(file->file_mapped());
  StateDict mixed;
  for (const auto& [name, t] : in_memory) {
    mixed[name] = name == "b" ? t  // in memory of its own: viewed
                              : ValueOrDie(Tensor::FromStorage(file, t.shape(), t.dtype(), t.offset()));
  }
  Toy model;
  auto arena = ValueOrDie(ParameterArena::CreateViewing(model, mixed, DType::kBF16, Device::Cpu(),
                                                        /*view_mapped_files=*/false));
  const char* fbegin = static_cast<const char*>(file->data());
  for (const auto& [name, t] : arena.named_tensors()) {
    const char* p = static_cast<const char*>(t.raw_data());
    EXPECT_FALSE(p >= fbegin && p < fbegin + file->bytes()) << name << " views the file";
    if (name == "b") EXPECT_EQ(p, static_cast<const char*>(mixed.at(name).raw_data()));
    EXPECT_EQ(ValueOrDie(t.ToFloatVector()), ValueOrDie(in_memory.at(name).ToFloatVector())) << name;
  }
  EXPECT_EQ(arena.viewed_bytes(), mixed.at("b").nbytes());
}

TEST(ParameterArenaTest, CreateViewingCopiesEverythingWhenTheDtypeDiffers) {
  Toy shape_source;
  auto like = ValueOrDie(ParameterArena::Create(shape_source, DType::kBF16, Device::Cpu()));
  std::shared_ptr<Storage> storage;
  const StateDict sd = PackedBf16StateDict(like, 4, &storage);
  Toy viewing_model, copying_model;
  auto viewing =
      ValueOrDie(ParameterArena::CreateViewing(viewing_model, sd, DType::kF32, Device::Cpu()));
  auto copying = ValueOrDie(ParameterArena::Create(copying_model, DType::kF32, Device::Cpu()));
  ASSERT_TRUE(copying.LoadStateDict(sd).ok());
  EXPECT_EQ(viewing.viewed_bytes(), 0u);
  EXPECT_TRUE(viewing.Zero().ok());
  Toy again;
  auto viewing2 = ValueOrDie(ParameterArena::CreateViewing(again, sd, DType::kF32, Device::Cpu()));
  for (const auto& [name, t] : viewing2.named_tensors()) {
    EXPECT_EQ(ValueOrDie(t.ToFloatVector()), ValueOrDie(ValueOrDie(copying.Get(name)).ToFloatVector()))
        << name;
  }
}

TEST(ParameterArenaTest, CreateViewingReportsProblemsAsLoadStateDict) {
  Toy model;
  auto like = ValueOrDie(ParameterArena::Create(model, DType::kBF16, Device::Cpu()));
  std::shared_ptr<Storage> storage;
  StateDict sd = PackedBf16StateDict(like, 5, &storage);
  sd.erase("norm");
  sd["w"] = ValueOrDie(Tensor::Empty({5, 3}, DType::kBF16));
  Toy fresh;
  auto arena = ParameterArena::CreateViewing(fresh, sd, DType::kBF16, Device::Cpu());
  ASSERT_FALSE(arena.ok());
  EXPECT_THAT(std::string(arena.status().message()), HasSubstr("1 missing [norm [7]]"));
  EXPECT_THAT(std::string(arena.status().message()), HasSubstr("w: checkpoint [5, 3] vs model [3, 5]"));
  EXPECT_FALSE(fresh.IsMaterialized());
}

}  // namespace
}  // namespace cctune
