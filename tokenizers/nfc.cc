#include "tokenizers/nfc.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "tokenizers/utf8.h"

namespace cctune {
namespace {

struct CombiningRange {
  uint32_t first, last;
  uint8_t ccc;
};
struct Decomposition {
  uint32_t cp;
  uint16_t offset;
  uint8_t length;
};
struct Composition {
  uint32_t first, second, composite;
};

#include "tokenizers/nfc_tables.inc"

// Hangul syllables (Unicode 3.12).
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28;
constexpr uint32_t kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

uint8_t CombiningClass(uint32_t cp) {
  if (cp < 0x300) return 0;
  const auto* end = std::end(kCombiningClasses);
  const auto* it = std::upper_bound(
      std::begin(kCombiningClasses), end, cp,
      [](uint32_t c, const CombiningRange& r) { return c < r.first; });
  if (it == std::begin(kCombiningClasses)) return 0;
  --it;
  return cp <= it->last ? it->ccc : 0;
}

void Decompose(uint32_t cp, std::vector<uint32_t>* out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const uint32_t s = cp - kSBase;
    out->push_back(kLBase + s / kNCount);
    out->push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out->push_back(kTBase + s % kTCount);
    return;
  }
  const auto* end = std::end(kDecompositions);
  const auto* it = std::lower_bound(std::begin(kDecompositions), end, cp,
                                    [](const Decomposition& d, uint32_t c) { return d.cp < c; });
  if (it == end || it->cp != cp) {
    out->push_back(cp);
    return;
  }
  out->insert(out->end(), kDecompositionData + it->offset,
              kDecompositionData + it->offset + it->length);
}

// The primary composite of (a, b), or 0.
uint32_t Compose(uint32_t a, uint32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount) {
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  }
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount) {
    return a + (b - kTBase);
  }
  const auto* end = std::end(kCompositions);
  const auto* it = std::lower_bound(std::begin(kCompositions), end, Composition{a, b, 0},
                                    [](const Composition& x, const Composition& y) {
                                      return x.first != y.first ? x.first < y.first
                                                                : x.second < y.second;
                                    });
  return it != end && it->first == a && it->second == b ? it->composite : 0;
}

// One code point from valid UTF-8 at s[*i]; invalid bytes come out as themselves (a value
// >= 0x110000 that no table holds) and are written back unchanged.
uint32_t Next(std::string_view s, size_t* i) {
  const uint8_t c = static_cast<uint8_t>(s[*i]);
  auto cont = [&](size_t k) { return static_cast<uint8_t>(s[*i + k]) & 0x3F; };
  if (c < 0x80) {
    *i += 1;
    return c;
  }
  if ((c & 0xE0) == 0xC0 && *i + 1 < s.size()) {
    const uint32_t cp = ((c & 0x1F) << 6) | cont(1);
    *i += 2;
    return cp;
  }
  if ((c & 0xF0) == 0xE0 && *i + 2 < s.size()) {
    const uint32_t cp = ((c & 0x0F) << 12) | (cont(1) << 6) | cont(2);
    *i += 3;
    return cp;
  }
  if ((c & 0xF8) == 0xF0 && *i + 3 < s.size()) {
    const uint32_t cp = ((c & 0x07) << 18) | (cont(1) << 12) | (cont(2) << 6) | cont(3);
    *i += 4;
    return cp;
  }
  *i += 1;
  return 0x110000 + c;
}

void Put(uint32_t cp, std::string* out) {
  if (cp >= 0x110000) {
    out->push_back(static_cast<char>(cp - 0x110000));  // an invalid byte, as it came
  } else {
    AppendUtf8(cp, out);
  }
}

}  // namespace

const char* NfcUnicodeVersion() { return kNfcUnicodeVersion; }

std::string NormalizeNfc(std::string_view text) {
  // Text below U+0300 has no combining marks and nothing to recompose: already NFC.
  bool simple = true;
  for (size_t i = 0; i < text.size() && simple; ++i) {
    const uint8_t c = static_cast<uint8_t>(text[i]);
    simple = c < 0xCC;  // ASCII, continuation bytes, and lead bytes of U+0080..U+02FF
  }
  if (simple) return std::string(text);

  // 1. Full canonical decomposition.
  std::vector<uint32_t> cps;
  cps.reserve(text.size());
  for (size_t i = 0; i < text.size();) Decompose(Next(text, &i), &cps);
  // 2. Canonical ordering: stable sort of each run of nonzero combining classes.
  std::vector<uint8_t> ccc(cps.size());
  for (size_t i = 0; i < cps.size(); ++i) ccc[i] = CombiningClass(cps[i]);
  for (size_t i = 0; i < cps.size();) {
    if (ccc[i] == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < cps.size() && ccc[j] != 0) ++j;
    for (size_t a = i + 1; a < j; ++a) {  // insertion sort: runs are short
      for (size_t b = a; b > i && ccc[b - 1] > ccc[b]; --b) {
        std::swap(ccc[b - 1], ccc[b]);
        std::swap(cps[b - 1], cps[b]);
      }
    }
    i = j;
  }
  // 3. Canonical composition.
  std::string out;
  out.reserve(text.size());
  size_t starter = SIZE_MAX;  // index into `kept`
  std::vector<uint32_t> kept;
  kept.reserve(cps.size());
  int last_ccc = -1;
  for (size_t i = 0; i < cps.size(); ++i) {
    const uint32_t cp = cps[i];
    const uint8_t c = ccc[i];
    if (starter != SIZE_MAX) {
      // Not blocked: nothing between the starter and cp, or everything between has a lower
      // class than cp (and cp is not a starter following a combining mark).
      const bool adjacent = starter + 1 == kept.size();
      const bool unblocked = adjacent || (last_ccc != 0 && last_ccc < c);
      if (unblocked) {
        const uint32_t composite = Compose(kept[starter], cp);
        if (composite != 0) {
          kept[starter] = composite;
          continue;
        }
      }
    }
    if (c == 0) starter = kept.size();
    kept.push_back(cp);
    last_ccc = c;
  }
  for (uint32_t cp : kept) Put(cp, &out);
  return out;
}

}  // namespace cctune
