// Decode steps allocate nothing: no Storage (core/device_interface's byte accounting: no
// tensor buffer, KV-cache growth, logits or scratch per token) and no heap block (a counting
// operator new in this test binary, which also sees the kernels' and the thread pool's
// allocations; tensor views keep their shape and strides inline, core/tensor.h's Shape). The
// first decode step may allocate its reusable buffers; every later step must not.
#include <atomic>
#include <cstdlib>
#include <new>
#include <vector>

#include "core/device_interface.h"
#include "core/random.h"
#include "generation/generate.h"
#include "generation/test_models.h"
#include "gtest/gtest.h"

namespace {
std::atomic<int64_t> g_heap_allocations{0};
}  // namespace

void* operator new(std::size_t n) {
  g_heap_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return operator new(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  g_heap_allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(n == 0 ? 1 : n);
}
void* operator new[](std::size_t n, const std::nothrow_t& t) noexcept { return operator new(n, t); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

namespace cctune {
namespace {

struct Counts {
  int64_t heap = 0;
  int64_t storage = 0;
};

Counts Now() {
  return {g_heap_allocations.load(), GetMemoryStats(Device::Cpu()).total_allocations};
}

// Runs greedy (or sampled) generation and returns the counts seen at each step's callback.
std::vector<Counts> CountsPerStep(const testing::RandomModelSpec& spec, int64_t batch,
                                  const ops::SamplingParams& sampling, int64_t new_tokens) {
  LoadedModel lm = ValueOrDie(testing::RandomModel(spec));
  TransformerDecoder& model = *lm.model;
  EXPECT_TRUE(model.SetupCaches(batch, spec.dtype, /*max_seq_len=*/64, KvCacheLayout::kGrouped).ok());
  std::vector<std::vector<int32_t>> prompts;
  for (int64_t r = 0; r < batch; ++r) prompts.push_back({1, 5 + static_cast<int32_t>(r), 9, 2});
  Tensor prompt = ValueOrDie(LeftPad(prompts, /*pad_id=*/0));
  GenerateOptions opts;
  opts.max_new_tokens = new_tokens;
  opts.sampling = sampling;
  std::vector<Counts> counts;
  counts.reserve(new_tokens);
  opts.on_token = [&](const GenerationStep&) { counts.push_back(Now()); };
  Generator gen(11);
  GenerateResult out = ValueOrDie(Generate(model, prompt, opts, gen));
  EXPECT_EQ(out.num_generated, new_tokens);
  return counts;
}

void ExpectNoAllocationsPerStep(const std::vector<Counts>& counts) {
  ASSERT_GE(counts.size(), 4u);
  // counts[0]: after prefill; counts[1]: after the first decode step (buffers made there).
  for (size_t t = 2; t < counts.size(); ++t) {
    EXPECT_EQ(counts[t].storage - counts[t - 1].storage, 0)
        << "Storage allocations in decode step " << t;
    EXPECT_EQ(counts[t].heap - counts[t - 1].heap, 0) << "heap allocations in decode step " << t;
  }
}

TEST(DecodeAllocationsTest, GreedyBatchOneAllocatesNothingPerToken) {
  testing::RandomModelSpec spec;
  ExpectNoAllocationsPerStep(CountsPerStep(spec, 1, {0.f, 0, 1.f}, 12));
}

TEST(DecodeAllocationsTest, SampledSmallBatchAllocatesNothingPerToken) {
  testing::RandomModelSpec spec;
  spec.tie_word_embeddings = true;
  ExpectNoAllocationsPerStep(CountsPerStep(spec, 3, {0.8f, 20, 0.9f}, 12));
}

TEST(DecodeAllocationsTest, Bf16WeightsAllocateNothingPerToken) {
  testing::RandomModelSpec spec;
  spec.dtype = DType::kBF16;
  // Wide enough that the GEMVs run on the thread pool.
  spec.embed_dim = 256;
  spec.intermediate_dim = 512;
  spec.num_heads = 8;
  spec.num_kv_heads = 4;
  ExpectNoAllocationsPerStep(CountsPerStep(spec, 1, {0.f, 0, 1.f}, 12));
}

// The counter sees allocations: a test that could not fail would prove nothing.
TEST(DecodeAllocationsTest, CounterSeesHeapAndStorageAllocations) {
  const Counts before = Now();
  auto* v = new std::vector<int>(100);
  Tensor t = ValueOrDie(Tensor::Empty({4}, DType::kF32));
  const Counts after = Now();
  delete v;
  EXPECT_GE(after.heap - before.heap, 2);
  EXPECT_EQ(after.storage - before.storage, 1);
}

}  // namespace
}  // namespace cctune
