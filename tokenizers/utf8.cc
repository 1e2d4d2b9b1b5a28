#include "tokenizers/utf8.h"

#include <cstdint>

namespace cctune {
namespace {

constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD

bool IsContinuation(uint8_t b) { return (b & 0xC0) == 0x80; }

// For a lead byte: the total sequence length and the allowed range of the second byte
// (Unicode Table 3-7). Returns 0 for bytes that cannot start a sequence.
int LeadInfo(uint8_t b, uint8_t* lo, uint8_t* hi) {
  *lo = 0x80;
  *hi = 0xBF;
  if (b >= 0xC2 && b <= 0xDF) return 2;
  if (b == 0xE0) {
    *lo = 0xA0;
    return 3;
  }
  if (b == 0xED) {
    *hi = 0x9F;
    return 3;
  }
  if (b >= 0xE1 && b <= 0xEF) return 3;
  if (b == 0xF0) {
    *lo = 0x90;
    return 4;
  }
  if (b >= 0xF1 && b <= 0xF3) return 4;
  if (b == 0xF4) {
    *hi = 0x8F;
    return 4;
  }
  return 0;
}

// Number of bytes at s[0..] that form a valid prefix of a sequence (>= 1 when s[0] is a valid
// lead byte), and the full length the sequence needs. valid_prefix == need: complete.
void ScanSequence(const uint8_t* s, size_t n, size_t* valid_prefix, size_t* need) {
  uint8_t lo, hi;
  const int len = LeadInfo(s[0], &lo, &hi);
  *need = static_cast<size_t>(len);
  if (len == 0) {
    *valid_prefix = 0;
    return;
  }
  size_t k = 1;
  if (k < n && k < static_cast<size_t>(len) && s[1] >= lo && s[1] <= hi) {
    ++k;
    while (k < n && k < static_cast<size_t>(len) && IsContinuation(s[k])) ++k;
  }
  *valid_prefix = k;
}

}  // namespace

size_t Utf8SequenceLength(std::string_view s) {
  if (s.empty()) return 0;
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  if (p[0] < 0x80) return 1;
  size_t valid, need;
  ScanSequence(p, s.size(), &valid, &need);
  return (need != 0 && valid == need) ? need : 0;
}

bool IsValidUtf8(std::string_view s) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    // ASCII fast path, 8 bytes at a time.
    while (i + 8 <= n) {
      uint64_t w;
      __builtin_memcpy(&w, p + i, 8);
      if (w & 0x8080808080808080ULL) break;
      i += 8;
    }
    if (i >= n) break;
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    size_t valid, need;
    ScanSequence(p + i, n - i, &valid, &need);
    if (need == 0 || valid != need) return false;
    i += need;
  }
  return true;
}

void AppendReplacingInvalidUtf8(std::string_view s, std::string* out) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  size_t run_start = 0;  // start of the pending run of valid bytes
  while (i < n) {
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    size_t valid, need;
    ScanSequence(p + i, n - i, &valid, &need);
    if (need != 0 && valid == need) {
      i += need;
      continue;
    }
    out->append(s.data() + run_start, i - run_start);
    out->append(kReplacement);
    i += valid == 0 ? 1 : valid;  // a maximal subpart is replaced by one U+FFFD
    run_start = i;
  }
  out->append(s.data() + run_start, n - run_start);
}

std::string ReplaceInvalidUtf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  AppendReplacingInvalidUtf8(s, &out);
  return out;
}

std::string Utf8StreamBuffer::Push(std::string_view bytes) {
  pending_.append(bytes.data(), bytes.size());
  // Hold back a trailing valid-but-incomplete sequence (at most 3 bytes).
  size_t keep = 0;
  const auto* p = reinterpret_cast<const uint8_t*>(pending_.data());
  const size_t n = pending_.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const size_t start = n - back;
    if (IsContinuation(p[start])) continue;
    if (p[start] >= 0x80) {
      size_t valid, need;
      ScanSequence(p + start, back, &valid, &need);
      if (need != 0 && valid == back && back < need) keep = back;
    }
    break;
  }
  std::string out;
  AppendReplacingInvalidUtf8(std::string_view(pending_).substr(0, n - keep), &out);
  pending_.erase(0, n - keep);
  return out;
}

std::string Utf8StreamBuffer::Flush() {
  std::string out = ReplaceInvalidUtf8(pending_);
  pending_.clear();
  return out;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace cctune
