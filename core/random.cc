#include "core/random.h"

#include <cmath>

namespace cctune {

std::array<uint32_t, 4> Philox4x32(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kM0) * c[0];
    const uint64_t p1 = static_cast<uint64_t>(kM1) * c[2];
    const uint32_t hi0 = static_cast<uint32_t>(p0 >> 32), lo0 = static_cast<uint32_t>(p0);
    const uint32_t hi1 = static_cast<uint32_t>(p1 >> 32), lo1 = static_cast<uint32_t>(p1);
    c = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
    k[0] += kW0;
    k[1] += kW1;
  }
  return c;
}

uint32_t Generator::NextUint32() {
  const uint64_t block = offset_ / 4;
  const int lane = static_cast<int>(offset_ % 4);
  ++offset_;
  const auto r = Philox4x32({static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), 0, 0},
                            {static_cast<uint32_t>(seed_), static_cast<uint32_t>(seed_ >> 32)});
  return r[lane];
}

uint64_t Generator::NextUint64() {
  const uint64_t hi = NextUint32();
  return (hi << 32) | NextUint32();
}

float Generator::Uniform() { return static_cast<float>(NextUint32() >> 8) * (1.0f / 16777216.0f); }

double Generator::UniformDouble() {
  return static_cast<double>(NextUint64() >> 11) * (1.0 / 9007199254740992.0);
}

double Generator::Normal() {
  const double u1 = 1.0 - UniformDouble();  // (0, 1]
  const double u2 = UniformDouble();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

uint64_t Generator::UniformInt(uint64_t n) {
  if (n <= 1) return 0;
  // Rejection sampling for an unbiased result.
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x;
  do {
    x = NextUint64();
  } while (x >= limit);
  return x % n;
}

namespace {
template <typename Fn>
absl::Status FillWith(Tensor& t, Fn fn, const char* what) {
  if (!IsFloating(t.dtype())) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": needs a floating tensor, got ", DTypeName(t.dtype())));
  }
  if (t.device().is_meta()) return absl::OkStatus();
  CCTUNE_ASSIGN_OR_RETURN(Tensor host, Tensor::Empty(t.shape(), DType::kF32));
  float* p = host.data<float>();
  for (int64_t i = 0; i < host.numel(); ++i) p[i] = static_cast<float>(fn());
  return t.CopyFrom(host);
}
}  // namespace

absl::Status FillNormal(Tensor& t, double mean, double std, Generator& gen) {
  return FillWith(t, [&] { return mean + std * gen.Normal(); }, "FillNormal");
}

absl::Status FillUniform(Tensor& t, double low, double high, Generator& gen) {
  return FillWith(t, [&] { return low + (high - low) * gen.UniformDouble(); }, "FillUniform");
}

absl::StatusOr<Tensor> RandomNormal(Shape shape, DType dtype, Generator& gen, Device device) {
  CCTUNE_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty(std::move(shape), dtype, device));
  CCTUNE_RETURN_IF_ERROR(FillNormal(t, 0.0, 1.0, gen));
  return t;
}

}  // namespace cctune
