// Upper bounds of the components' and recipes' integer config keys (docs/config_reference.md,
// "Limits"). Far above any real run, and small enough that sums and products of them cannot
// overflow int64. Schemas use them with KeyType::Int().InRange(...).
#ifndef CCTUNE_CONFIG_KEY_LIMITS_H_
#define CCTUNE_CONFIG_KEY_LIMITS_H_

#include <cstdint>

namespace cctune {

inline constexpr int64_t kMaxSeqLenKey = int64_t{1} << 20;      // max_seq_len, max_new_tokens
inline constexpr int64_t kMaxBatchSizeKey = int64_t{1} << 16;   // batch_size, accumulation
inline constexpr int64_t kMaxEpochsKey = int64_t{1} << 20;      // epochs
inline constexpr int64_t kMaxStepsKey = int64_t{1} << 40;       // step counts and periods
inline constexpr int64_t kMaxNumSamplesKey = int64_t{1} << 22;  // generated dataset samples
inline constexpr int64_t kMaxTopKKey = (int64_t{1} << 31) - 1;  // top_k

}  // namespace cctune

#endif  // CCTUNE_CONFIG_KEY_LIMITS_H_
