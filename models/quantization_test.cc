#include "models/quantization.h"

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "checkpoint/mapped_file.h"
#include "config/yaml_loader.h"
#include "core/random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/tiny/tiny.h"
#include "modules/parameters.h"

namespace cctune {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using cpu::QuantFormat;

const WeightQuantization kInt8{QuantFormat::kInt8PerChannel, 0};
const WeightQuantization kInt4{QuantFormat::kInt4Grouped, 32};

ConfigNode Node(const std::string& yaml) { return ValueOrDie(LoadYamlString(yaml, "q.yaml")); }

TEST(QuantizerRegistryTest, BuildsBothQuantizersUnderEverySpelling) {
  ASSERT_TRUE(RegisterQuantizers().ok());
  for (const char* name : {"cctune.training.quantization.Int8WeightOnlyQuantizer",
                           "torchtune.training.quantization.Int8WeightOnlyQuantizer",
                           "torchtune.utils.quantization.Int8WeightOnlyQuantizer"}) {
    auto q = QuantizerRegistry().Instantiate(Node(absl::StrCat("_component_: ", name)));
    ASSERT_TRUE(q.ok()) << name << ": " << q.status();
    EXPECT_EQ(*q, kInt8);
  }
  auto q4 = QuantizerRegistry().Instantiate(
      Node("_component_: torchtune.training.quantization.Int4WeightOnlyQuantizer\ngroupsize: 64"));
  ASSERT_TRUE(q4.ok()) << q4.status();
  EXPECT_EQ(q4->format, QuantFormat::kInt4Grouped);
  EXPECT_EQ(q4->groupsize, 64);
  EXPECT_EQ(q4->Mode(), "4w");
  auto dflt = QuantizerRegistry().Instantiate(
      Node("_component_: cctune.training.quantization.Int4WeightOnlyQuantizer"));
  ASSERT_TRUE(dflt.ok());
  EXPECT_EQ(dflt->groupsize, 256);  // torchao's default
}

TEST(QuantizerRegistryTest, BadGroupsizeNamesKeyAndValue) {
  ASSERT_TRUE(RegisterQuantizers().ok());
  for (const char* g : {"48", "16", "512", "0"}) {
    auto q = QuantizerRegistry().Instantiate(Node(absl::StrCat(
        "_component_: cctune.training.quantization.Int4WeightOnlyQuantizer\ngroupsize: ", g)));
    ASSERT_FALSE(q.ok()) << g;
    EXPECT_THAT(q.status().message(), AllOf(HasSubstr("groupsize"), HasSubstr(g)));
  }
  auto extra = QuantizerRegistry().Instantiate(
      Node("_component_: cctune.training.quantization.Int8WeightOnlyQuantizer\ngroupsize: 32"));
  ASSERT_FALSE(extra.ok());
  EXPECT_THAT(extra.status().message(), HasSubstr("groupsize"));
}

TEST(QuantizationMetadataTest, RoundTripsAndRejectsBadValues) {
  for (const WeightQuantization& q : {kInt8, kInt4, WeightQuantization{QuantFormat::kInt4Grouped, 256}}) {
    auto back = QuantizationFromMetadata(QuantizationMetadata(q), "f");
    ASSERT_TRUE(back.ok());
    ASSERT_TRUE(back->has_value());
    EXPECT_EQ(**back, q);
  }
  auto none = QuantizationFromMetadata({{"format", "pt"}}, "f");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  EXPECT_THAT(QuantizationFromMetadata({{"quantizer", "Int8DynActInt4WeightQuantizer"}}, "m.st")
                  .status()
                  .message(),
              AllOf(HasSubstr("m.st"), HasSubstr("Int8DynActInt4WeightQuantizer")));
  EXPECT_THAT(QuantizationFromMetadata(
                  {{"quantizer", "Int4WeightOnlyQuantizer"}, {"groupsize", "40"}}, "m.st")
                  .status()
                  .message(),
              AllOf(HasSubstr("groupsize"), HasSubstr("40")));
}

// Per projection the error follows from the format: |y - ŷ| <= Σ_i |x_i| · |w_i - ŵ_i| with
// |w - ŵ| <= scale / 2 (int8) or <= scale / 2 + 2^-8·|zero| + 2^-5·scale (int4), plus f32
// rounding.
TEST(QuantizedLinearTest, OutputErrorIsWithinTheFormatsBound) {
  Generator gen(7);
  const int64_t in = 200, out = 48, rows = 3;  // 200 = 6 groups of 32 and a short one
  for (const WeightQuantization& q :
       {kInt8, kInt4, WeightQuantization{QuantFormat::kInt4Grouped, 128}}) {
    SCOPED_TRACE(q.Mode());
    Linear ref(in, out, /*bias=*/true);
    auto ref_arena = ValueOrDie(ParameterArena::Create(ref, DType::kF32, Device::Cpu()));
    ASSERT_TRUE(ref_arena.InitializeRandom(gen).ok());
    QuantizedLinear ql(in, out, /*bias=*/true, q);
    auto arena = ValueOrDie(ParameterArena::Create(ql, DType::kF32, Device::Cpu()));
    const StateDict quantized = ValueOrDie(QuantizeStateDict(ref_arena.ExportStateDict(), ql, q));
    ASSERT_TRUE(arena.LoadStateDict(quantized, /*strict=*/true).ok());

    Tensor x = ValueOrDie(Tensor::Empty({rows, in}, DType::kF32));
    ASSERT_TRUE(FillUniform(x, -1, 1, gen).ok());
    const Tensor y = ValueOrDie(ref(x));
    const Tensor yq = ValueOrDie(ql(x));
    const std::vector<double> xv = ValueOrDie(x.ToDoubleVector());
    const std::vector<double> yv = ValueOrDie(y.ToDoubleVector());
    const std::vector<double> yqv = ValueOrDie(yq.ToDoubleVector());
    const std::vector<double> wv = ValueOrDie(ref.weight().ToDoubleVector());
    for (int64_t j = 0; j < out; ++j) {
      for (int64_t r = 0; r < rows; ++r) {
        double bound = 0, mag = 0;
        for (int64_t i = 0; i < in; ++i) {
          double step;
          if (q.format == QuantFormat::kInt8PerChannel) {
            step = 0.5 * ql.scales().data<float>()[j];
          } else {
            const int64_t g = cpu::Int4Groups(in, q.groupsize), gi = j * g + i / q.groupsize;
            const double s = Bf16ToFloat(ql.scales().data<bf16>()[gi]);
            const double z = Bf16ToFloat(ql.zeros()->data<bf16>()[gi]);
            step = 0.5 * s + std::ldexp(std::fabs(z), -8) + std::ldexp(s, -5);
          }
          bound += std::fabs(xv[r * in + i]) * step;
          mag += std::fabs(xv[r * in + i]) * (std::fabs(wv[j * in + i]) + 24 * step);
        }
        bound += (in + 16) * std::ldexp(mag, -23);
        ASSERT_LE(std::fabs(yqv[r * out + j] - yv[r * out + j]), bound) << r << " " << j;
      }
    }
    // Training through a quantized layer is refused.
    ActivationStore store;
    EXPECT_EQ(ql.Backward(nullptr, y, x, store, 0).code(), absl::StatusCode::kUnimplemented);
  }
}

// A tiny decoder quantized through the factory: its state dict loads strictly into the
// quantized model, every Linear is a QuantizedLinear (the tied output is not), and the logits
// stay near the f32 model's (the bound is loose: a few per-layer bounds through 2 layers).
TEST(QuantizedDecoderTest, QuantizedStateDictLoadsAndTracksTheF32Model) {
  for (bool tied : {false, true}) {
    for (const WeightQuantization& q : {kInt8, kInt4}) {
      SCOPED_TRACE(absl::StrCat(q.Mode(), tied ? " tied" : " untied"));
      Generator gen(11);
      const DecoderConfig config = TinyLlamaConfig(256, 2, 8, 2, 64, 160, 64, tied);
      auto f32 = ValueOrDie(BuildDecoder(config));
      auto f32_arena = ValueOrDie(ParameterArena::Create(*f32, DType::kF32, Device::Cpu()));
      ASSERT_TRUE(f32_arena.InitializeRandom(gen).ok());
      auto qm = ValueOrDie(BuildDecoder(config, QuantizedProjections(q)));
      EXPECT_EQ(dynamic_cast<const QuantizedLinear*>(&qm->output()) != nullptr, !tied);
      const StateDict qsd = ValueOrDie(QuantizeStateDict(f32_arena.ExportStateDict(), *qm, q));
      EXPECT_EQ(qsd.at("layers.0.attn.q_proj.weight").dtype(), DType::kI32);
      EXPECT_EQ(qsd.at("tok_embeddings.weight").dtype(), DType::kF32);
      auto q_arena = ValueOrDie(ParameterArena::Create(*qm, DType::kF32, Device::Cpu()));
      ASSERT_TRUE(q_arena.LoadStateDict(qsd, /*strict=*/true).ok());

      Tensor tokens = ValueOrDie(Tensor::Empty({1, 16}, DType::kI32));
      for (int64_t i = 0; i < 16; ++i) tokens.data<int32_t>()[i] = static_cast<int32_t>((37 * i + 5) % 256);
      const std::vector<double> a = ValueOrDie(ValueOrDie((*f32)(tokens)).ToDoubleVector());
      const std::vector<double> b = ValueOrDie(ValueOrDie((*qm)(tokens)).ToDoubleVector());
      double max_err = 0, max_abs = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        max_err = std::max(max_err, std::fabs(a[i] - b[i]));
        max_abs = std::max(max_abs, std::fabs(a[i]));
      }
      EXPECT_GT(max_err, 0.0);  // it did quantize
      EXPECT_LE(max_err, (q.format == QuantFormat::kInt8PerChannel ? 0.05 : 0.5) * max_abs);
    }
  }
}

// Resident pages of this process (the second field of /proc/self/statm).
int64_t ResidentPages() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident;
}

// A weight that views a mapped file has its pages handed back once quantized: the process
// holds the quantized weight, not the full-precision one as well. The quantized result is
// that of the same weight in memory of its own.
TEST(QuantizeStateDictTest, ReleasesTheMappedSourcePages) {
  const int64_t in = 4096, out = 512;  // bf16: 4 MiB; int8: 2 MiB
  Generator gen(11);
  Tensor w = ValueOrDie(Tensor::Empty({out, in}, DType::kBF16));
  ASSERT_TRUE(FillUniform(w, -1, 1, gen).ok());
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(tmp ? tmp : "/tmp") + "/quantization_test_weight.bin";
  std::ofstream(path, std::ios::binary)
      .write(static_cast<const char*>(w.raw_data()), static_cast<std::streamsize>(w.nbytes()));
  std::shared_ptr<Storage> mapped = ValueOrDie(MapFile(path));
  Tensor view = ValueOrDie(Tensor::FromStorage(mapped, {out, in}, DType::kBF16));
  const int64_t page = ::sysconf(_SC_PAGESIZE);
  const int64_t source_pages = static_cast<int64_t>(w.nbytes()) / page;

  QuantizedLinear ql(in, out, /*bias=*/false, kInt8);
  const int64_t before = ResidentPages();
  const StateDict quantized = ValueOrDie(QuantizeStateDict({{"weight", view}}, ql, kInt8));
  const int64_t grown = ResidentPages() - before;
  const int64_t quantized_pages = static_cast<int64_t>(quantized.at("weight").nbytes()) / page;
  // Without the release: source + quantized (1.5x the source); with it: the quantized weight
  // (on up to 2 MiB pages) and a few pages of scales.
  EXPECT_LE(grown, quantized_pages + source_pages / 8)
      << "resident pages grew by " << grown << " (source " << source_pages << ", quantized "
      << quantized_pages << ")";

  const StateDict reference = ValueOrDie(QuantizeStateDict({{"weight", w}}, ql, kInt8));
  for (const char* name : {"weight", "scales"}) {
    const Tensor& a = quantized.at(name);
    const Tensor& b = reference.at(name);
    ASSERT_EQ(a.nbytes(), b.nbytes()) << name;
    EXPECT_EQ(std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()), 0) << name;
  }
}

TEST(QuantizeStateDictTest, ErrorsNameTheTensor) {
  auto qm = ValueOrDie(BuildDecoder(TinyLlamaConfig(), QuantizedProjections(kInt8)));
  StateDict empty;
  EXPECT_THAT(QuantizeStateDict(empty, *qm, kInt8).status().message(),
              HasSubstr("layers.0.attn.q_proj.weight"));
  StateDict bad;
  bad["layers.0.attn.q_proj.weight"] = ValueOrDie(Tensor::Empty({64}, DType::kF32));
  EXPECT_THAT(QuantizeStateDict(bad, *qm, kInt8).status().message(),
              AllOf(HasSubstr("layers.0.attn.q_proj.weight"), HasSubstr("2-D")));
}

}  // namespace
}  // namespace cctune
