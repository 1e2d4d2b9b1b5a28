#include "kernels/cpu/dropout.h"

#include <algorithm>
#include <array>

#include "core/random.h"
#include "kernels/cpu/cpu_util.h"

namespace cctune {
namespace cpu {
namespace {

constexpr int64_t kChunk = 512;

// words[k] = Philox word number first + k of stream `seed` (Generator's numbering: word w is
// lane w % 4 of the block with counter w / 4 and key seed), for k in [0, n).
void PhiloxWords(uint64_t seed, uint64_t first, int64_t n, uint32_t* words) {
  const std::array<uint32_t, 2> key = {static_cast<uint32_t>(seed),
                                       static_cast<uint32_t>(seed >> 32)};
  int64_t k = 0;
  while (k < n) {
    const uint64_t w = first + static_cast<uint64_t>(k);
    const uint64_t block = w / 4;
    const auto r = Philox4x32(
        {static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), 0u, 0u}, key);
    for (uint64_t lane = w % 4; lane < 4 && k < n; ++lane, ++k) words[k] = r[lane];
  }
}

// Elements [i0, i0 + n) (row-major indices) of one row run: x and out at element offsets
// xo / oo with strides xs / os.
void DropoutRun(const Tensor& out, const Tensor& x, int64_t i0, int64_t n, int64_t oo,
                int64_t os, int64_t xo, int64_t xs, uint32_t drop_below, float scale,
                uint64_t seed, uint64_t offset) {
  const DType dto = out.dtype(), dtx = x.dtype();
  void* po = out.raw_data();
  const void* px = x.raw_data();
  alignas(64) float xbuf[kChunk], obuf[kChunk];
  alignas(64) uint32_t words[kChunk];
  for (int64_t c = 0; c < n; c += kChunk) {
    const int64_t len = std::min(kChunk, n - c);
    PhiloxWords(seed, offset + static_cast<uint64_t>(i0 + c), len, words);
    const float* xv = LoadF32Or(ElemAddr(px, dtx, xo + c * xs), dtx, xs, len, xbuf);
    for (int64_t k = 0; k < len; ++k) {
      obuf[k] = (words[k] >> 8) < drop_below ? 0.f : xv[k] * scale;
    }
    StoreF32(obuf, ElemAddr(po, dto, oo + c * os), dto, os, len);
  }
}

}  // namespace

absl::Status Dropout(Tensor& out, const Tensor& x, uint32_t drop_below, float scale,
                     uint64_t seed, uint64_t offset) {
  const int64_t n = x.numel();
  if (n == 0) return absl::OkStatus();
  if (x.is_contiguous() && out.is_contiguous()) {
    // One run of n elements, cut into blocks that threads take in any order: every element's
    // value depends on its index alone.
    constexpr int64_t kBlock = 8 * kChunk;
    const int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (n >= (1 << 15))
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t i0 = blk * kBlock, len = std::min(kBlock, n - i0);
      DropoutRun(out, x, i0, len, i0, 1, i0, 1, drop_below, scale, seed, offset);
    }
    return absl::OkStatus();
  }
  const RowIndexer xr(x.strided_view()), orow(out.strided_view());
  const int64_t rows = xr.rows(), len = xr.row_length();
  const int64_t xs = xr.inner_stride(), os = orow.inner_stride();
#pragma omp parallel for schedule(static) if (n >= (1 << 15))
  for (int64_t r = 0; r < rows; ++r) {
    DropoutRun(out, x, r * len, len, orow.Offset(r), os, xr.Offset(r), xs, drop_below, scale,
               seed, offset);
  }
  return absl::OkStatus();
}

}  // namespace cpu
}  // namespace cctune
