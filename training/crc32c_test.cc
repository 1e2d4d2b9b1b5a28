#include "training/crc32c.h"

#include <cstdint>
#include <string>
#include <vector>

#include "core/random.h"
#include "gtest/gtest.h"

namespace cctune {
namespace {

// Bit-at-a-time reference straight from the definition.
uint32_t ReferenceCrc32c(const uint8_t* p, size_t n) {
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ ((c & 1u) ? 0x82F63B78u : 0u);
  }
  return ~c;
}

using Impl = uint32_t (*)(uint32_t, const void*, size_t);

std::vector<std::pair<const char*, Impl>> Impls() {
  std::vector<std::pair<const char*, Impl>> impls = {{"portable", &Crc32cExtendPortable},
                                                     {"dispatch", &Crc32cExtend}};
  if (HasSse42Crc32c()) impls.push_back({"sse42", &Crc32cExtendSse42});
  return impls;
}

TEST(Crc32cTest, PublishedVectors) {
  // The check value of the CRC catalogue, and the vectors of RFC 3720 (iSCSI) B.4.
  std::vector<uint8_t> zeros(32, 0), ones(32, 0xff), up(32), down(32);
  for (int i = 0; i < 32; ++i) {
    up[i] = static_cast<uint8_t>(i);
    down[i] = static_cast<uint8_t>(31 - i);
  }
  for (const auto& [name, fn] : Impls()) {
    SCOPED_TRACE(name);
    EXPECT_EQ(fn(0, "123456789", 9), 0xE3069283u);
    EXPECT_EQ(fn(0, zeros.data(), 32), 0x8A9136AAu);
    EXPECT_EQ(fn(0, ones.data(), 32), 0x62A8AB43u);
    EXPECT_EQ(fn(0, up.data(), 32), 0x46DD794Eu);
    EXPECT_EQ(fn(0, down.data(), 32), 0x113FDB5Cu);
    EXPECT_EQ(fn(0, "", 0), 0u);
  }
  EXPECT_EQ(Crc32c(std::string("123456789")), 0xE3069283u);
}

TEST(Crc32cTest, MatchesBitwiseReferenceOnRandomDataAllLengthsAndAlignments) {
  Generator gen(7);
  std::vector<uint8_t> buf(1100);
  for (uint8_t& b : buf) b = static_cast<uint8_t>(gen.NextUint32());
  for (const auto& [name, fn] : Impls()) {
    SCOPED_TRACE(name);
    for (size_t offset = 0; offset < 9; ++offset) {
      for (size_t n : {0, 1, 2, 3, 7, 8, 9, 15, 16, 17, 63, 64, 65, 255, 1000, 1091}) {
        if (offset + n > buf.size()) continue;
        ASSERT_EQ(fn(0, buf.data() + offset, n), ReferenceCrc32c(buf.data() + offset, n))
            << "offset " << offset << " n " << n;
      }
    }
  }
}

TEST(Crc32cTest, ExtendEqualsWholeBuffer) {
  Generator gen(11);
  std::vector<uint8_t> buf(777);
  for (uint8_t& b : buf) b = static_cast<uint8_t>(gen.NextUint32());
  const uint32_t whole = ReferenceCrc32c(buf.data(), buf.size());
  for (const auto& [name, fn] : Impls()) {
    for (size_t split : {0, 1, 5, 8, 100, 776, 777}) {
      const uint32_t a = fn(0, buf.data(), split);
      EXPECT_EQ(fn(a, buf.data() + split, buf.size() - split), whole) << name << " " << split;
    }
  }
}

TEST(Crc32cTest, MaskRoundTripsAndDiffers) {
  Generator gen(3);
  for (int i = 0; i < 1000; ++i) {
    const uint32_t c = gen.NextUint32();
    EXPECT_EQ(UnmaskCrc32c(MaskCrc32c(c)), c);
    EXPECT_NE(MaskCrc32c(c), c);
  }
  // Values from tensorboard's own Python implementation (masked_crc32c).
  EXPECT_EQ(MaskCrc32c(Crc32c(std::string("123456789"))), 0xC78AB0E5u);
  EXPECT_EQ(MaskCrc32c(Crc32c(std::string())), 0xA282EAD8u);
  std::string up(32, '\0');
  for (int i = 0; i < 32; ++i) up[i] = static_cast<char>(i);
  EXPECT_EQ(MaskCrc32c(Crc32c(up)), 0x951F7892u);
}

}  // namespace
}  // namespace cctune
