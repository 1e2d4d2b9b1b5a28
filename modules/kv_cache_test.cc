#include "modules/kv_cache.h"

#include <string>
#include <vector>

#include "core/device_interface.h"
#include "core/random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cctune {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kBatch = 2, kMaxSeqLen = 16, kHeads = 4, kHeadDim = 8;

std::unique_ptr<KVCache> MakeCache(DType dtype = DType::kF32) {
  return ValueOrDie(KVCache::Create(kBatch, kMaxSeqLen, kHeads, kHeadDim, dtype));
}

// Random k/v [b, n_kv, s, h_d] (v differs from k).
struct KV {
  Tensor k, v;
};
KV RandomKV(int64_t b, int64_t s, uint64_t seed) {
  Generator gen(seed);
  return {ValueOrDie(RandomNormal({b, kHeads, s, kHeadDim}, DType::kF32, gen)),
          ValueOrDie(RandomNormal({b, kHeads, s, kHeadDim}, DType::kF32, gen))};
}

Tensor Positions(const Tensor& t, int64_t start, int64_t len) {
  return ValueOrDie(t.Narrow(2, start, len));
}

std::vector<float> Floats(const Tensor& t) { return ValueOrDie(t.ToFloatVector()); }

bool AllZero(const Tensor& t) {
  for (float x : Floats(t)) {
    if (x != 0.f) return false;
  }
  return true;
}

TEST(KvCacheTest, StartsZeroedAndEmpty) {
  auto cache = MakeCache();
  EXPECT_TRUE(AllZero(cache->k_cache()));
  EXPECT_TRUE(AllZero(cache->v_cache()));
  EXPECT_EQ(cache->Size(), 0);
  EXPECT_EQ(cache->k_cache().shape(), (Shape{kBatch, kHeads, kMaxSeqLen, kHeadDim}));
  EXPECT_EQ(ValueOrDie(cache->FilledKeys()).shape(), (Shape{kBatch, kHeads, 0, kHeadDim}));
}

TEST(KvCacheTest, BytesAreExactlyTwoTimesStorage) {
  EXPECT_EQ(MakeCache(DType::kF32)->Bytes(), 2u * kBatch * kHeads * kMaxSeqLen * kHeadDim * 4);
  EXPECT_EQ(MakeCache(DType::kBF16)->Bytes(), 2u * kBatch * kHeads * kMaxSeqLen * kHeadDim * 2);
  const MemoryStats before = GetMemoryStats(Device::Cpu());
  auto meta = ValueOrDie(KVCache::Create(64, 131072, 8, 128, DType::kBF16, Device::Meta()));
  EXPECT_EQ(meta->Bytes(), size_t{2} * 64 * 8 * 131072 * 128 * 2);
  EXPECT_EQ(GetMemoryStats(Device::Cpu()).current_bytes, before.current_bytes);
}

TEST(KvCacheTest, ResetZeroesAndRewinds) {
  auto cache = MakeCache();
  KV kv = RandomKV(kBatch, kMaxSeqLen, 1);
  ASSERT_TRUE(cache->Update(kv.k, kv.v).ok());
  EXPECT_EQ(cache->Size(), kMaxSeqLen);
  EXPECT_FALSE(AllZero(cache->k_cache()));
  ASSERT_TRUE(cache->Reset().ok());
  EXPECT_TRUE(AllZero(cache->k_cache()));
  EXPECT_TRUE(AllZero(cache->v_cache()));
  EXPECT_EQ(cache->Size(), 0);
  // Usable again from position 0.
  ASSERT_TRUE(cache->Update(kv.k, kv.v).ok());
  EXPECT_EQ(Floats(cache->k_cache()), Floats(kv.k));
}

TEST(KvCacheTest, BatchLargerThanTheCacheIsAnErrorAndWritesNothing) {
  auto cache = MakeCache();
  KV kv = RandomKV(4 * kBatch, 3, 2);
  absl::Status s = cache->Update(kv.k, kv.v);
  ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("batch size of 2"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("batch size 8"));
  EXPECT_EQ(cache->Size(), 0);
  EXPECT_TRUE(AllZero(cache->k_cache()));
}

TEST(KvCacheTest, WritePastMaxSeqLenIsAnErrorAndWritesNothing) {
  auto cache = MakeCache();
  KV kv = RandomKV(kBatch, 4 * kMaxSeqLen, 3);
  absl::Status s = cache->Update(kv.k, kv.v);
  ASSERT_EQ(s.code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(std::string(s.message()), HasSubstr("sequence length of 64"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("max_seq_len (16)"));
  EXPECT_EQ(cache->Size(), 0);
  EXPECT_TRUE(AllZero(cache->k_cache()));
}

TEST(KvCacheTest, OverflowAfterAPartialFillIsAnErrorAndKeepsTheFill) {
  auto cache = MakeCache();
  KV full = RandomKV(kBatch, kMaxSeqLen, 4);
  ASSERT_TRUE(
      cache->Update(Positions(full.k, 0, kMaxSeqLen / 2), Positions(full.v, 0, kMaxSeqLen / 2))
          .ok());
  const auto k_before = Floats(cache->k_cache());
  absl::Status s = cache->Update(full.k, full.v);
  ASSERT_EQ(s.code(), absl::StatusCode::kOutOfRange);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("sequence length of " + std::to_string(kMaxSeqLen + kMaxSeqLen / 2)));
  EXPECT_EQ(cache->Size(), kMaxSeqLen / 2);
  EXPECT_EQ(Floats(cache->k_cache()), k_before);
  // Exactly filling the rest is fine.
  EXPECT_TRUE(
      cache->Update(Positions(full.k, 0, kMaxSeqLen / 2), Positions(full.v, 0, kMaxSeqLen / 2))
          .ok());
  EXPECT_EQ(cache->Size(), kMaxSeqLen);
  EXPECT_FALSE(cache->Update(Positions(full.k, 0, 1), Positions(full.v, 0, 1)).ok());
}

TEST(KvCacheTest, SizeFollowsUpdates) {
  auto cache = MakeCache();
  KV full = RandomKV(kBatch, kMaxSeqLen, 5);
  ASSERT_TRUE(
      cache->Update(Positions(full.k, 0, kMaxSeqLen / 2), Positions(full.v, 0, kMaxSeqLen / 2))
          .ok());
  EXPECT_EQ(cache->Size(), kMaxSeqLen / 2);
  ASSERT_TRUE(cache
                  ->Update(Positions(full.k, kMaxSeqLen / 2 + 1, 1),
                           Positions(full.v, kMaxSeqLen / 2 + 1, 1))
                  .ok());
  EXPECT_EQ(cache->Size(), kMaxSeqLen / 2 + 1);
  ASSERT_TRUE(cache->Update(Positions(full.k, 0, 0), Positions(full.v, 0, 0)).ok());
  EXPECT_EQ(cache->Size(), kMaxSeqLen / 2 + 1);
}

// Expected cache: the first `filled` positions of `full`, zeros after.
std::vector<float> Expected(const Tensor& full, int64_t filled) {
  Tensor want = ValueOrDie(Tensor::Zeros(full.shape(), DType::kF32));
  Tensor dst = ValueOrDie(want.Narrow(2, 0, filled));
  CCTUNE_CHECK_OK(dst.CopyFrom(Positions(full, 0, filled)));
  return Floats(want);
}

TEST(KvCacheTest, SingleUpdateWritesThePrefill) {
  auto cache = MakeCache();
  KV full = RandomKV(kBatch, kMaxSeqLen, 6);
  ASSERT_TRUE(
      cache->Update(Positions(full.k, 0, kMaxSeqLen / 2), Positions(full.v, 0, kMaxSeqLen / 2))
          .ok());
  EXPECT_EQ(Floats(cache->k_cache()), Expected(full.k, kMaxSeqLen / 2));
  EXPECT_EQ(Floats(cache->v_cache()), Expected(full.v, kMaxSeqLen / 2));
  EXPECT_EQ(Floats(ValueOrDie(cache->FilledKeys())), Floats(Positions(full.k, 0, kMaxSeqLen / 2)));
}

TEST(KvCacheTest, MultipleUpdatesAppend) {
  auto cache = MakeCache();
  KV full = RandomKV(kBatch, kMaxSeqLen, 7);
  const int64_t half = kMaxSeqLen / 2;
  ASSERT_TRUE(cache->Update(Positions(full.k, 0, half), Positions(full.v, 0, half)).ok());
  ASSERT_TRUE(cache->Update(Positions(full.k, half, 1), Positions(full.v, half, 1)).ok());
  EXPECT_EQ(Floats(cache->k_cache()), Expected(full.k, half + 1));
  EXPECT_EQ(Floats(cache->v_cache()), Expected(full.v, half + 1));
  for (int64_t t = half + 1; t < kMaxSeqLen; ++t) {
    ASSERT_TRUE(cache->Update(Positions(full.k, t, 1), Positions(full.v, t, 1)).ok());
  }
  EXPECT_EQ(Floats(cache->k_cache()), Floats(full.k));
  EXPECT_EQ(Floats(ValueOrDie(cache->FilledValues(1))), Floats(ValueOrDie(full.v.Narrow(0, 0, 1))));
}

TEST(KvCacheTest, SmallerBatchWritesOnlyItsRows) {
  auto cache = MakeCache();
  KV kv = RandomKV(1, 3, 8);
  ASSERT_TRUE(cache->Update(kv.k, kv.v).ok());
  EXPECT_EQ(Floats(ValueOrDie(cache->FilledKeys(1))), Floats(kv.k));
  EXPECT_TRUE(AllZero(ValueOrDie(cache->k_cache().Narrow(0, 1, 1))));
  EXPECT_FALSE(cache->FilledKeys(3).ok());
}

TEST(KvCacheTest, AcceptsStridedInputsAndConvertsToTheCacheDtype) {
  auto cache = MakeCache(DType::kBF16);
  Generator gen(9);
  // [b, s, n_kv, h_d] transposed to [b, n_kv, s, h_d], as attention hands it over.
  Tensor k_bsnh = ValueOrDie(RandomNormal({kBatch, 5, kHeads, kHeadDim}, DType::kF32, gen));
  Tensor v_bsnh = ValueOrDie(RandomNormal({kBatch, 5, kHeads, kHeadDim}, DType::kF32, gen));
  Tensor k = ValueOrDie(k_bsnh.Transpose(1, 2)), v = ValueOrDie(v_bsnh.Transpose(1, 2));
  ASSERT_FALSE(k.is_contiguous());
  ASSERT_TRUE(cache->Update(k, v).ok());
  const auto got = Floats(ValueOrDie(cache->FilledKeys()));
  const auto want = Floats(ValueOrDie(k.Contiguous()));
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], Bf16ToFloat(FloatToBf16(want[i])));
}

TEST(KvCacheTest, RejectsMismatchedShapesAndArguments) {
  auto cache = MakeCache();
  Generator gen(10);
  Tensor k = ValueOrDie(RandomNormal({kBatch, kHeads + 1, 2, kHeadDim}, DType::kF32, gen));
  absl::Status s = cache->Update(k, k);
  EXPECT_THAT(std::string(s.message()), HasSubstr("[b, 4, s, 8]"));
  Tensor k2 = ValueOrDie(RandomNormal({kBatch, kHeads, 2, kHeadDim}, DType::kF32, gen));
  Tensor v3 = ValueOrDie(RandomNormal({kBatch, kHeads, 3, kHeadDim}, DType::kF32, gen));
  EXPECT_FALSE(cache->Update(k2, v3).ok());
  EXPECT_FALSE(cache->Update(ValueOrDie(k2.View({-1})), ValueOrDie(k2.View({-1}))).ok());
  EXPECT_EQ(cache->Size(), 0);
  EXPECT_FALSE(KVCache::Create(0, 16, 4, 8, DType::kF32).ok());
  EXPECT_FALSE(KVCache::Create(1, 16, 4, 8, DType::kI64).ok());
}

TEST(KvCacheTest, MetaCacheTracksPositionsWithoutMemory) {
  auto cache = ValueOrDie(
      KVCache::Create(kBatch, kMaxSeqLen, kHeads, kHeadDim, DType::kF32, Device::Meta()));
  Tensor k = ValueOrDie(Tensor::Empty({kBatch, kHeads, 10, kHeadDim}, DType::kF32, Device::Meta()));
  ASSERT_TRUE(cache->Update(k, k).ok());
  EXPECT_EQ(cache->Size(), 10);
  EXPECT_FALSE(cache->Update(k, k).ok());
  EXPECT_EQ(ValueOrDie(cache->FilledKeys()).shape(), (Shape{kBatch, kHeads, 10, kHeadDim}));
}

}  // namespace
}  // namespace cctune
