// Seeded, counter-based random numbers (Philox4x32-10). The same seed gives the same numbers on
// every run and machine, and the whole state is two integers (seed, offset), so a training
// run can save and restore it exactly.
#ifndef CCTUNE_CORE_RANDOM_H_
#define CCTUNE_CORE_RANDOM_H_

#include <array>
#include <cstdint>

#include "absl/status/status.h"
#include "core/tensor.h"

namespace cctune {

// One Philox4x32-10 block: 4 random words for (counter, key).
std::array<uint32_t, 4> Philox4x32(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed) {}

  uint64_t seed() const { return seed_; }
  // Number of 32-bit words consumed so far.
  uint64_t offset() const { return offset_; }
  void SetState(uint64_t seed, uint64_t offset) {
    seed_ = seed;
    offset_ = offset;
  }

  uint32_t NextUint32();
  uint64_t NextUint64();
  // Uniform in [0, 1) with 24 random bits.
  float Uniform();
  // Uniform in [0, 1) with 53 random bits.
  double UniformDouble();
  // Standard normal (Box-Muller on two doubles).
  double Normal();
  // Uniform integer in [0, n).
  uint64_t UniformInt(uint64_t n);

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
};

// Fills a tensor (any float dtype, any device; generated on the host) with N(mean, std^2) or
// U[low, high). Deterministic for a given generator state.
absl::Status FillNormal(Tensor& t, double mean, double std, Generator& gen);
absl::Status FillUniform(Tensor& t, double low, double high, Generator& gen);
// Convenience for tests: a new CPU tensor with N(0, 1) values.
absl::StatusOr<Tensor> RandomNormal(Shape shape, DType dtype, Generator& gen,
                                    Device device = Device::Cpu());

}  // namespace cctune

#endif  // CCTUNE_CORE_RANDOM_H_
