#include "training/recipe_state.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "checkpoint/safetensors.h"
#include "core/random.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace cctune {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string TestDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp ? tmp : "/tmp", "/recipe_state_test_", name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

bool SameBits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

RecipeState SampleState(Generator& gen) {
  RecipeState s;
  s.proto.set_step(1234);
  s.proto.set_epoch(2);
  s.proto.set_seed(0xFEDCBA9876543210ull);  // above 2^63: uint64 must survive
  s.proto.set_tokens_seen(987654321012ll);
  s.proto.mutable_rng()->set_seed(42);
  s.proto.mutable_rng()->set_offset(gen.NextUint64());
  DataLoaderPositionProto* d = s.proto.mutable_data();
  d->set_epoch(2);
  d->set_batch_index(17);
  d->set_shuffle_seed(7);
  d->set_shuffle(true);
  d->set_dataset_size(1001);
  d->set_batch_size(4);
  d->set_drop_last(true);
  OptimizerState o;
  o.name = "adamw";
  o.step = 1234;
  // Doubles that have no short decimal form must come back with the same bits.
  o.hyperparameters = {{"lr", 1.0 / 3.0 * 1e-4},
                       {"beta1", 0.9},
                       {"beta2", 0.95},
                       {"eps", 1e-8},
                       {"weight_decay", gen.UniformDouble()}};
  o.tensors["params.exp_avg"] = ValueOrDie(RandomNormal({37}, DType::kF32, gen));
  o.tensors["params.exp_avg_sq"] = ValueOrDie(RandomNormal({37}, DType::kF32, gen));
  o.tensors["bf16.master"] = ValueOrDie(RandomNormal({5}, DType::kF32, gen));
  SetOptimizerState(o, &s);
  return s;
}

TEST(RecipeStateTest, SaveLoadRoundTripsEveryFieldAndTensorExactly) {
  Generator gen(1);
  const RecipeState state = SampleState(gen);
  const std::string dir = TestDir("roundtrip");
  const std::string path = dir + "/recipe_state.safetensors";
  ASSERT_TRUE(SaveRecipeState(path, state).ok());
  // Atomic write: only the final file is left behind.
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    ++files;
    EXPECT_EQ(e.path().filename(), "recipe_state.safetensors");
  }
  EXPECT_EQ(files, 1);

  auto loaded = LoadRecipeState(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  RecipeStateProto expected = state.proto;
  expected.set_format_version(1);
  expected.clear_tensor_names();
  for (const auto& [name, t] : state.tensors) expected.add_tensor_names(name);
  std::string diff;
  google::protobuf::util::MessageDifferencer differ;
  differ.ReportDifferencesToString(&diff);
  EXPECT_TRUE(differ.Compare(expected, loaded->proto)) << diff;
  EXPECT_EQ(loaded->proto.seed(), 0xFEDCBA9876543210ull);
  ASSERT_EQ(loaded->tensors.size(), 3u);
  for (const auto& [name, t] : state.tensors) {
    EXPECT_TRUE(SameBits(loaded->tensors.at(name), t)) << name;
  }

  auto opt = GetOptimizerState(*loaded);
  ASSERT_TRUE(opt.ok()) << opt.status();
  EXPECT_EQ(opt->name, "adamw");
  EXPECT_EQ(opt->step, 1234);
  EXPECT_EQ(opt->tensors.size(), 3u);
  EXPECT_TRUE(opt->tensors.count("params.exp_avg_sq"));
  EXPECT_EQ(opt->hyperparameters.at("lr"), 1.0 / 3.0 * 1e-4);  // bit-exact through text
  EXPECT_EQ(opt->hyperparameters.at("weight_decay"),
            state.proto.optimizer().hyperparameters().at("weight_decay"));

  // The metadata is readable text format.
  auto file = SafetensorsFile::Open(path);
  ASSERT_TRUE(file.ok());
  const std::string& text = file->metadata().at(kRecipeStateMetadataKey);
  EXPECT_THAT(text, HasSubstr("step: 1234"));
  EXPECT_THAT(text, HasSubstr("batch_index: 17"));
  EXPECT_THAT(text, HasSubstr("name: \"adamw\""));

  // Saving again replaces the file.
  RecipeState later = state;
  later.proto.set_step(1300);
  ASSERT_TRUE(SaveRecipeState(path, later).ok());
  EXPECT_EQ(ValueOrDie(LoadRecipeState(path)).proto.step(), 1300);
}

TEST(RecipeStateTest, DoublesSurviveTextFormatBitExactly) {
  Generator gen(5);
  RecipeStateProto p;
  std::vector<double> values;
  for (int i = 0; i < 200; ++i) {
    const double v =
        gen.UniformDouble() * std::pow(10.0, static_cast<int>(gen.UniformInt(40)) - 20);
    values.push_back(v);
    (*p.mutable_optimizer()->mutable_hyperparameters())[absl::StrCat("h", i)] = v;
  }
  p.set_format_version(1);
  const std::string dir = TestDir("doubles");
  RecipeState s;
  s.proto = p;
  ASSERT_TRUE(SaveRecipeState(dir + "/s.safetensors", s).ok());
  auto loaded = LoadRecipeState(dir + "/s.safetensors");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  for (int i = 0; i < 200; ++i) {
    EXPECT_EQ(loaded->proto.optimizer().hyperparameters().at(absl::StrCat("h", i)), values[i]);
  }
}

// The optimizer goes through a file and continues bit-identically.
TEST(RecipeStateTest, OptimizerResumesBitIdenticallyThroughTheFile) {
  Generator gen(9);
  const int64_t n = 1001;
  Tensor p = ValueOrDie(RandomNormal({n}, DType::kF32, gen));
  Tensor g = ValueOrDie(Tensor::Zeros({n}, DType::kF32));
  Tensor pb = ValueOrDie(ValueOrDie(RandomNormal({33}, DType::kF32, gen)).To(DType::kBF16));
  Tensor gb = ValueOrDie(Tensor::Zeros({33}, DType::kF32));
  AdamWOptions o;
  o.lr = 0.01;
  auto opt = ValueOrDie(AdamW::Create({{"f32", p, g}, {"bf16", pb, gb}}, o));
  std::vector<Tensor> grads, gradsb;
  for (int i = 0; i < 6; ++i) {
    grads.push_back(ValueOrDie(RandomNormal({n}, DType::kF32, gen)));
    gradsb.push_back(ValueOrDie(RandomNormal({33}, DType::kF32, gen)));
  }
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(g.CopyFrom(grads[i]).ok());
    ASSERT_TRUE(gb.CopyFrom(gradsb[i]).ok());
    ASSERT_TRUE(opt->Step().ok());
  }
  const std::string path = TestDir("resume") + "/recipe_state.safetensors";
  RecipeState state;
  state.proto.set_step(3);
  SetOptimizerState(opt->ExportState(), &state);
  ASSERT_TRUE(SaveRecipeState(path, state).ok());
  Tensor p2 = ValueOrDie(p.Clone()), pb2 = ValueOrDie(pb.Clone());
  Tensor g2 = ValueOrDie(Tensor::Zeros({n}, DType::kF32));
  Tensor gb2 = ValueOrDie(Tensor::Zeros({33}, DType::kF32));
  auto resumed = ValueOrDie(AdamW::Create({{"f32", p2, g2}, {"bf16", pb2, gb2}}, AdamWOptions()));
  RecipeState loaded = ValueOrDie(LoadRecipeState(path));
  ASSERT_TRUE(resumed->ImportState(ValueOrDie(GetOptimizerState(loaded))).ok());
  for (int i = 3; i < 6; ++i) {
    ASSERT_TRUE(g.CopyFrom(grads[i]).ok());
    ASSERT_TRUE(gb.CopyFrom(gradsb[i]).ok());
    ASSERT_TRUE(g2.CopyFrom(grads[i]).ok());
    ASSERT_TRUE(gb2.CopyFrom(gradsb[i]).ok());
    ASSERT_TRUE(opt->Step().ok());
    ASSERT_TRUE(resumed->Step().ok());
  }
  EXPECT_TRUE(SameBits(p, p2));
  EXPECT_TRUE(SameBits(pb, pb2));
}

// Writes a safetensors file with the given tensors and recipe-state text.
std::string WriteRaw(const std::string& dir, const std::string& text, const StateDict& tensors) {
  const std::string path = dir + "/bad.safetensors";
  CCTUNE_CHECK_OK(SaveSafetensors(path, tensors, {{kRecipeStateMetadataKey, text}}));
  return path;
}

TEST(RecipeStateTest, LoadErrorsNameTheFileAndTheField) {
  Generator gen(2);
  const std::string dir = TestDir("errors");
  const RecipeState good = SampleState(gen);
  RecipeStateProto p = good.proto;
  p.set_format_version(1);
  for (const auto& [name, t] : good.tensors) p.add_tensor_names(name);
  const std::string good_text = RecipeStateToText(p);
  ASSERT_TRUE(LoadRecipeState(WriteRaw(dir, good_text, good.tensors)).ok());

  auto error = [&](const std::string& text, const StateDict& tensors) {
    const std::string path = WriteRaw(dir, text, tensors);
    auto r = LoadRecipeState(path);
    EXPECT_FALSE(r.ok());
    const std::string msg(r.status().message());
    EXPECT_THAT(msg, HasSubstr(path));
    return msg;
  };
  EXPECT_THAT(error(absl::StrReplaceAll(good_text, {{"step: 1234\nepoch", "step: -3\nepoch"}}),
                    good.tensors),
              HasSubstr("field step (-3) must be >= 0"));
  EXPECT_THAT(
      error(absl::StrReplaceAll(good_text, {{"batch_index: 17", "batch_index: -1"}}), good.tensors),
      HasSubstr("field data.batch_index (-1)"));
  EXPECT_THAT(error(absl::StrReplaceAll(good_text, {{"format_version: 1", "format_version: 2"}}),
                    good.tensors),
              HasSubstr("field format_version (2) is not supported"));
  EXPECT_THAT(error(good_text + "\nno_such_field: 3\n", good.tensors), HasSubstr("no_such_field"));
  EXPECT_THAT(error(good_text + "\nstep: \"x\"\n", good.tensors), HasSubstr("line "));
  StateDict extra = good.tensors;
  extra["stray"] = ValueOrDie(RandomNormal({2}, DType::kF32, gen));
  EXPECT_THAT(error(good_text, extra), HasSubstr("does not list the file's tensor 'stray'"));
  StateDict fewer = good.tensors;
  fewer.erase("optimizer.bf16.master");
  EXPECT_THAT(error(good_text, fewer),
              HasSubstr("lists 'optimizer.bf16.master', which the file does not contain"));

  // Not a recipe state at all.
  const std::string plain = dir + "/plain.safetensors";
  ASSERT_TRUE(SaveSafetensors(plain, good.tensors).ok());
  auto r = LoadRecipeState(plain);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("no 'cctune.recipe_state' entry"));
  r = LoadRecipeState(dir + "/missing.safetensors");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("missing.safetensors"));
}

TEST(RecipeStateTest, SaveRejectsDanglingOptimizerTensorNames) {
  Generator gen(3);
  RecipeState s = SampleState(gen);
  s.tensors.erase("optimizer.params.exp_avg");
  const absl::Status st = SaveRecipeState(TestDir("dangling") + "/s.safetensors", s);
  EXPECT_THAT(std::string(st.message()), HasSubstr("optimizer.params.exp_avg"));
  RecipeState empty;
  EXPECT_THAT(std::string(GetOptimizerState(empty).status().message()),
              HasSubstr("no optimizer state"));
}

TEST(RecipeStateTest, DataLoaderPositionAndRngRoundTrip) {
  std::vector<Sample> samples(10);
  for (int i = 0; i < 10; ++i) samples[i].tokens = samples[i].labels = {i, i + 1};
  auto dataset = std::make_shared<const Dataset>(std::move(samples), false, "d");
  DataLoaderOptions o;
  o.batch_size = 3;
  o.seed = 11;
  DataLoader loader = ValueOrDie(DataLoader::Create(dataset, o));
  ASSERT_TRUE(loader.SetPosition({4, 2}).ok());
  Generator gen(77);
  for (int i = 0; i < 5; ++i) gen.NextUint32();

  RecipeState state;
  *state.proto.mutable_data() = DataLoaderPositionToProto(loader);
  *state.proto.mutable_rng() = RngStateToProto(gen);
  const std::string path = TestDir("loader") + "/s.safetensors";
  ASSERT_TRUE(SaveRecipeState(path, state).ok());
  const RecipeState loaded = ValueOrDie(LoadRecipeState(path));

  DataLoader fresh = ValueOrDie(DataLoader::Create(dataset, o));
  ASSERT_TRUE(RestoreDataLoaderPosition(loaded.proto.data(), path, &fresh).ok());
  EXPECT_TRUE(fresh.position() == (DataLoaderPosition{4, 2}));
  Generator restored;
  RestoreRngState(loaded.proto.rng(), &restored);
  EXPECT_EQ(restored.NextUint64(), gen.NextUint64());

  // A loader with another seed or batch size would select other batches: refused.
  DataLoaderOptions other = o;
  other.seed = 12;
  DataLoader reseeded = ValueOrDie(DataLoader::Create(dataset, other));
  EXPECT_THAT(
      std::string(RestoreDataLoaderPosition(loaded.proto.data(), path, &reseeded).message()),
      HasSubstr("field data.shuffle_seed (11) differs from this run's data loader (12)"));
  other = o;
  other.batch_size = 2;
  DataLoader rebatched = ValueOrDie(DataLoader::Create(dataset, other));
  EXPECT_THAT(
      std::string(RestoreDataLoaderPosition(loaded.proto.data(), path, &rebatched).message()),
      HasSubstr("field data.batch_size (3)"));
  DataLoaderPositionProto far = loaded.proto.data();
  far.set_batch_index(9);
  EXPECT_THAT(std::string(RestoreDataLoaderPosition(far, path, &fresh).message()),
              HasSubstr(path + ": field data: "));
}

}  // namespace
}  // namespace cctune
