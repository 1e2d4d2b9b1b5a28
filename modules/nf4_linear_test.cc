#include "modules/nf4_linear.h"

#include <cmath>
#include <string>
#include <vector>

#include "core/random.h"
#include "core/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "modules/lora_linear.h"
#include "modules/parameters.h"

namespace cctune {
namespace {

using ::testing::HasSubstr;

std::vector<double> D(const Tensor& t) { return ValueOrDie(t.ToDoubleVector()); }

// max |a - b| / max(1, max |b|).
double RelDiff(const std::vector<double>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0, s = 1;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    m = std::max(m, std::fabs(a[i] - b[i]));
    s = std::max(s, std::fabs(b[i]));
  }
  return m / s;
}

constexpr int64_t kIn = 128, kOut = 256;  // 32768 elements: two scaler groups

TEST(Nf4LinearTest, ParametersAreTorchaosNf4Fields) {
  FrozenNF4Linear lin(kIn, kOut, /*bias=*/true);
  std::vector<std::string> names;
  for (const auto& [name, p] : lin.NamedParameters()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"weight", "bias", "nf4.quantized_scalers",
                                             "nf4.quantization_factor", "nf4.scaler_mean"}));
  auto arena = ValueOrDie(ParameterArena::Create(lin, DType::kBF16, Device::Cpu()));
  EXPECT_EQ(lin.weight().dtype(), DType::kI32);
  EXPECT_EQ(lin.weight().shape(), (Shape{kOut, kIn / 8}));
  EXPECT_EQ(lin.bias()->dtype(), DType::kBF16);
  // Half a byte per weight plus the scales: the bytes the arena holds for them.
  int64_t bytes = 0;
  for (const auto& [name, p] : lin.NamedParameters()) {
    if (name != "bias") bytes += p->value.nbytes();
  }
  EXPECT_EQ(bytes, cpu::Nf4Bytes(kIn * kOut));
  EXPECT_EQ(bytes, kIn * kOut / 2 + kIn * kOut / 64 + 2 * 4 + 4);
}

TEST(Nf4LinearTest, RejectsShapesTorchaoRejects) {
  const absl::Status s = CheckNf4Shape(32, 64, "layers.0.attn.q_proj.weight");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("layers.0.attn.q_proj.weight [64, 32] has 2048 elements"));
  EXPECT_TRUE(CheckNf4Shape(kIn, kOut, "w").ok());
}

// Forward, dx and the bias gradient against fp64 with the dequantized weight.
TEST(Nf4LinearTest, ForwardAndBackwardMatchFp64OfDequantizedWeight) {
  FrozenNF4Linear lin(kIn, kOut, /*bias=*/true);
  auto arena = ValueOrDie(ParameterArena::Create(lin, DType::kF32, Device::Cpu()));
  Generator gen(3);
  const Tensor w = ValueOrDie(RandomNormal({kOut, kIn}, DType::kBF16, gen));
  ASSERT_TRUE(lin.nf4().Quantize(lin.weight(), w, "w").ok());
  Tensor b = *lin.bias();
  ASSERT_TRUE(FillNormal(b, 0.0, 1.0, gen).ok());
  const std::vector<double> wd = D(ValueOrDie(lin.nf4().Dequantize(lin.weight(), DType::kF32)));
  // NF4 keeps the weight within its quantization error.
  const std::vector<double> w0 = D(w);
  double err = 0, ref = 0;
  for (size_t i = 0; i < w0.size(); ++i) {
    err += (wd[i] - w0[i]) * (wd[i] - w0[i]);
    ref += w0[i] * w0[i];
  }
  EXPECT_LT(std::sqrt(err / ref), 0.12);
  const int64_t m = 7;
  const Tensor x = ValueOrDie(RandomNormal({m, kIn}, DType::kF32, gen));
  const std::vector<double> xv = D(x), bv = D(b);
  std::vector<double> want(m * kOut);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t o = 0; o < kOut; ++o) {
      double acc = bv[o];
      for (int64_t j = 0; j < kIn; ++j) acc += xv[i * kIn + j] * wd[o * kIn + j];
      want[i * kOut + o] = acc;
    }
  }
  EXPECT_LT(RelDiff(D(ValueOrDie(lin(x))), want), 1e-5);

  const Tensor dy = ValueOrDie(RandomNormal({m, kOut}, DType::kF32, gen));
  const std::vector<double> dyv = D(dy);
  Tensor dx = ValueOrDie(Tensor::Zeros({m, kIn}, DType::kF32));
  Tensor db = ValueOrDie(Tensor::Zeros({kOut}, DType::kF32));
  ActivationStore store;
  store.SetGrad(*lin.bias(), db);
  ASSERT_TRUE(lin.Backward(&dx, dy, x, store, 0).ok());
  std::vector<double> want_dx(m * kIn, 0.0), want_db(kOut, 0.0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t o = 0; o < kOut; ++o) {
      want_db[o] += dyv[i * kOut + o];
      for (int64_t j = 0; j < kIn; ++j) want_dx[i * kIn + j] += dyv[i * kOut + o] * wd[o * kIn + j];
    }
  }
  EXPECT_LT(RelDiff(D(dx), want_dx), 1e-5);
  EXPECT_LT(RelDiff(D(db), want_db), 1e-6);
  EXPECT_EQ(store.Grad(lin.weight()), nullptr);  // frozen: no weight gradient exists
}

// QLoRA's LoRALinear computes what LoRA over the dequantized base computes: outputs, dx and
// the adapter's gradients.
TEST(Nf4LinearTest, QLoRALinearMatchesLoRAOnDequantizedBase) {
  const int64_t rank = 4, m = 5;
  LoRALinear q(kIn, kOut, rank, 8.0, 0.0, false, /*quantize_base=*/true);
  LoRALinear l(kIn, kOut, rank, 8.0, 0.0, false);
  ASSERT_NE(q.nf4(), nullptr);
  EXPECT_EQ(l.nf4(), nullptr);
  auto qa = ValueOrDie(ParameterArena::Create(q, DType::kF32, Device::Cpu()));
  auto la = ValueOrDie(ParameterArena::Create(l, DType::kF32, Device::Cpu()));
  Generator gen(9);
  ASSERT_TRUE(la.InitializeRandom(gen).ok());
  Tensor lb = l.lora_b().weight();
  ASSERT_TRUE(FillNormal(lb, 0.0, 0.5, gen).ok());
  ASSERT_TRUE(q.nf4()->Quantize(q.weight(), l.weight(), "w").ok());
  Tensor lw = l.weight();
  ASSERT_TRUE(lw.CopyFrom(ValueOrDie(q.nf4()->Dequantize(q.weight(), DType::kF32))).ok());
  for (auto [dst, src] : {std::make_pair(q.lora_a().weight(), l.lora_a().weight()),
                          std::make_pair(q.lora_b().weight(), l.lora_b().weight())}) {
    ASSERT_TRUE(dst.CopyFrom(src).ok());
  }
  const Tensor x = ValueOrDie(RandomNormal({m, kIn}, DType::kF32, gen));
  EXPECT_LT(RelDiff(D(ValueOrDie(q(x))), D(ValueOrDie(l(x)))), 1e-5);

  const Tensor dy = ValueOrDie(RandomNormal({m, kOut}, DType::kF32, gen));
  auto backward = [&](const LoRALinear& lin, std::vector<double>* dxv, std::vector<double>* dav,
                      std::vector<double>* dbv) {
    Tensor dx = ValueOrDie(Tensor::Zeros({m, kIn}, DType::kF32));
    Tensor da = ValueOrDie(Tensor::Zeros({rank, kIn}, DType::kF32));
    Tensor db = ValueOrDie(Tensor::Zeros({kOut, rank}, DType::kF32));
    ActivationStore store;
    store.SetGrad(lin.lora_a().weight(), da);
    store.SetGrad(lin.lora_b().weight(), db);
    ASSERT_TRUE(lin.Backward(&dx, dy, x, store, 0).ok());
    *dxv = D(dx);
    *dav = D(da);
    *dbv = D(db);
  };
  std::vector<double> qdx, qda, qdb, ldx, lda, ldb;
  backward(q, &qdx, &qda, &qdb);
  backward(l, &ldx, &lda, &ldb);
  EXPECT_LT(RelDiff(qdx, ldx), 1e-5);
  EXPECT_LT(RelDiff(qda, lda), 1e-6);
  EXPECT_LT(RelDiff(qdb, ldb), 1e-6);
  EXPECT_EQ(q.Merge().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace cctune
