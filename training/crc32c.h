// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as used by TFRecord framing and
// iSCSI. The SSE4.2 `crc32` instruction is used when the CPU has it (checked once at run
// time); otherwise a slicing-by-8 table implementation gives the same values.
//
//   uint32_t crc = Crc32c(data, n);                 // crc32c("123456789") == 0xE3069283
//   crc = Crc32cExtend(crc, more, m);               // == Crc32c(data ++ more)
//   uint32_t stored = MaskCrc32c(crc);              // TFRecord's masked form
#ifndef CCTUNE_TRAINING_CRC32C_H_
#define CCTUNE_TRAINING_CRC32C_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace cctune {

// The CRC of `data` continued from `crc` (the CRC of everything before it; 0 for none).
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n);
inline uint32_t Crc32c(const void* data, size_t n) { return Crc32cExtend(0, data, n); }
inline uint32_t Crc32c(std::string_view s) { return Crc32c(s.data(), s.size()); }

// The two implementations, exposed so tests can check both on any machine.
uint32_t Crc32cExtendPortable(uint32_t crc, const void* data, size_t n);
// Requires HasSse42Crc32c().
uint32_t Crc32cExtendSse42(uint32_t crc, const void* data, size_t n);
bool HasSse42Crc32c();

// TFRecord / LevelDB masking: a CRC stored next to data that itself holds CRCs.
inline uint32_t MaskCrc32c(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }
inline uint32_t UnmaskCrc32c(uint32_t masked) {
  const uint32_t rot = masked - 0xa282ead8u;
  return (rot >> 17) | (rot << 15);
}

}  // namespace cctune

#endif  // CCTUNE_TRAINING_CRC32C_H_
