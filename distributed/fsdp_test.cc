#include "distributed/fsdp.h"

#include <algorithm>
#include <sys/mman.h>
#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cctune {
namespace {

using ::testing::HasSubstr;

// N ranks as N threads of one process, for the world-size-generic logic without launching
// processes: each collective posts the rank's buffers, waits for every rank, computes its
// own result from everyone's inputs, and waits again before anyone reuses a buffer.
class ThreadWorld {
 public:
  explicit ThreadWorld(int n) : n_(n), inputs_(n) {}
  int size() const { return n_; }

  void Post(int rank, const void* input) {
    inputs_[rank] = input;
    Wait();
  }
  const float* f32(int rank) const { return static_cast<const float*>(inputs_[rank]); }
  const char* bytes(int rank) const { return static_cast<const char*>(inputs_[rank]); }
  void Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    const int gen = generation_;
    if (++arrived_ == n_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return generation_ != gen; });
    }
  }

 private:
  const int n_;
  std::vector<const void*> inputs_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  int generation_ = 0;
};

class ThreadGroup final : public ProcessGroup {
 public:
  ThreadGroup(ThreadWorld* world, int rank) : world_(world), rank_(rank) {}
  int rank() const override { return rank_; }
  int world_size() const override { return world_->size(); }
  const char* backend() const override { return "threads"; }

  absl::Status AllReduce(Tensor& t, ReduceOp op) override {
    world_->Post(rank_, t.raw_data());
    std::vector<float> sum(t.numel(), 0.0f);
    for (int r = 0; r < world_size(); ++r) {
      for (int64_t i = 0; i < t.numel(); ++i) sum[i] += world_->f32(r)[i];
    }
    world_->Wait();
    std::memcpy(t.raw_data(), sum.data(), t.nbytes());
    world_->Wait();
    return absl::OkStatus();
  }
  absl::Status ReduceScatter(const Tensor& input, Tensor& output, ReduceOp op) override {
    world_->Post(rank_, input.raw_data());
    const int64_t n = output.numel();
    float* out = output.data<float>();
    for (int64_t i = 0; i < n; ++i) {
      float acc = 0;
      for (int r = 0; r < world_size(); ++r) acc += world_->f32(r)[rank_ * n + i];
      out[i] = acc;
    }
    world_->Wait();
    return absl::OkStatus();
  }
  absl::Status AllGather(const Tensor& input, Tensor& output) override {
    world_->Post(rank_, input.raw_data());
    for (int r = 0; r < world_size(); ++r) {
      std::memcpy(static_cast<char*>(output.raw_data()) + r * input.nbytes(), world_->bytes(r),
                  input.nbytes());
    }
    world_->Wait();
    return absl::OkStatus();
  }
  absl::Status Broadcast(Tensor& t, int root) override {
    return absl::UnimplementedError("not used");
  }
  absl::Status Barrier() override {
    world_->Wait();
    return absl::OkStatus();
  }

 private:
  ThreadWorld* world_;
  int rank_;
};

// Runs `body(group)` on `n` ranks (threads) and waits for them.
void OnRanks(int n, const std::function<void(ProcessGroup&)>& body) {
  ThreadWorld world(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&world, &body, r] {
      ThreadGroup g(&world, r);
      body(g);
    });
  }
  for (std::thread& t : threads) t.join();
}

ParameterLayout TwoParameterLayout() {
  ParameterSpec a{"a", {3, 5}, DType::kF32, {}};
  ParameterSpec b{"b", {7}, DType::kF32, {}};
  return *ParameterLayout::Create({a, b});
}

TEST(FsdpTest, ShardNumelIsTheCeiling) {
  EXPECT_EQ(ShardNumel(64, 1), 64);
  EXPECT_EQ(ShardNumel(64, 2), 32);
  EXPECT_EQ(ShardNumel(64, 3), 22);
  EXPECT_EQ(ShardNumel(65, 5), 13);
  EXPECT_EQ(ShardNumel(1, 4), 1);
}

TEST(FsdpTest, PadBuffersToKeepsTheEntries) {
  const ParameterLayout layout = TwoParameterLayout();  // a at 0, b at 32: 39 elements -> 64
  for (int n = 1; n <= 5; ++n) {
    const ParameterLayout padded = layout.PadBuffersTo(n);
    ASSERT_EQ(padded.buffers().size(), 1u);
    EXPECT_EQ(padded.buffers()[0].numel % n, 0) << n;
    EXPECT_GE(padded.buffers()[0].numel, layout.buffers()[0].numel);
    EXPECT_LT(padded.buffers()[0].numel, layout.buffers()[0].numel + n);
    EXPECT_EQ(padded.Find("b")->offset, layout.Find("b")->offset);
  }
}

TEST(FsdpTest, AllReduceScalarIsExactAndTheSameOnEveryRank) {
  for (int n = 1; n <= 5; ++n) {
    std::vector<double> sums(n), maxes(n);
    OnRanks(n, [&](ProcessGroup& g) {
      const double mine = 0.1 * (g.rank() + 1);
      sums[g.rank()] = *AllReduceScalar(g, mine, ReduceOp::kSum);
      maxes[g.rank()] = *AllReduceScalar(g, mine, ReduceOp::kMax);
    });
    double want = 0;
    for (int r = 0; r < n; ++r) want += 0.1 * (r + 1);  // rank order, fp64
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(sums[r], want) << n;
      EXPECT_EQ(maxes[r], 0.1 * n) << n;
    }
  }
}

// Every rank's gradient arena summed into its shard, the arena zeroed; the updated shards
// gathered back into every rank's parameters — for 1 to 5 ranks.
TEST(FsdpTest, ReduceScatterAndAllGatherOverEveryWorldSize) {
  for (int n = 1; n <= 5; ++n) {
    const ParameterLayout layout = TwoParameterLayout().PadBuffersTo(n);
    const int64_t numel = layout.buffers()[0].numel;
    std::vector<std::vector<float>> gathered(n);
    std::vector<int64_t> shard_bytes(n);
    OnRanks(n, [&](ProcessGroup& g) {
      ParameterArena params = *ParameterArena::Allocate(layout, Device::Cpu());
      ParameterArena grads = *ParameterArena::Allocate(layout, Device::Cpu());
      float* gp = grads.buffers()[0].data<float>();
      for (int64_t i = 0; i < numel; ++i) gp[i] = static_cast<float>(i * (g.rank() + 1));
      auto sharded = ShardedArena::Create(&g, params, grads);
      ASSERT_TRUE(sharded.ok()) << sharded.status();
      ASSERT_TRUE(sharded->ReduceScatterGradients().ok());
      const std::vector<ParamBuffer> buffers = sharded->OptimizerBuffers();
      ASSERT_EQ(buffers.size(), 1u);
      EXPECT_EQ(buffers[0].name, "buffer0_f32");
      const int64_t c = numel / n;
      ASSERT_EQ(buffers[0].grad.numel(), c);
      const float ranks_sum = n * (n + 1) / 2.0f;
      for (int64_t i = 0; i < c; ++i) {
        EXPECT_EQ(buffers[0].grad.data<float>()[i], (g.rank() * c + i) * ranks_sum);
      }
      for (int64_t i = 0; i < numel; ++i) ASSERT_EQ(gp[i], 0.0f);  // ready to accumulate
      // "Update" this rank's shard, then gather.
      for (int64_t i = 0; i < c; ++i) buffers[0].param.data<float>()[i] = 100.0f * g.rank() + i;
      ASSERT_TRUE(sharded->AllGatherParameters().ok());
      gathered[g.rank()] = *params.buffers()[0].ToFloatVector();
      shard_bytes[g.rank()] = sharded->ShardGradientBytes();
    });
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(shard_bytes[r], static_cast<int64_t>(numel / n * sizeof(float)));
      for (int64_t i = 0; i < numel; ++i) {
        const int64_t c = numel / n;
        EXPECT_EQ(gathered[r][i], 100.0f * (i / c) + i % c) << "world " << n << " rank " << r;
      }
    }
  }
}

TEST(FsdpTest, CreateRefusesBuffersThatDoNotSplit) {
  OnRanks(2, [](ProcessGroup& g) {
    ParameterLayout odd = *ParameterLayout::Create({{"a", {33}, DType::kF32, {}}});
    odd = odd.PadBuffersTo(2);  // 34 elements: a multiple of 2, not of 4
    ParameterArena p = *ParameterArena::Allocate(odd, Device::Cpu());
    EXPECT_TRUE(ShardedArena::Create(&g, p, p).ok());
  });
  ThreadWorld world(4);
  ThreadGroup g(&world, 0);
  ParameterArena p = *ParameterArena::Allocate(
      ParameterLayout::Create({{"a", {33}, DType::kF32, {}}})->PadBuffersTo(2), Device::Cpu());
  auto s = ShardedArena::Create(&g, p, p);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.status().message(), HasSubstr("multiple of 4 ranks"));
}

// Pages of elements [begin, end) of an f32 buffer that are resident (mincore), over the pages
// wholly inside the range.
int64_t ResidentPages(const Tensor& buf, int64_t begin, int64_t end) {
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t b = reinterpret_cast<uintptr_t>(buf.data<float>() + begin);
  const uintptr_t e = reinterpret_cast<uintptr_t>(buf.data<float>() + end);
  const uintptr_t first = (b + page - 1) / page * page, last = e / page * page;
  if (last <= first) return 0;
  std::vector<unsigned char> vec((last - first) / page);
  if (::mincore(reinterpret_cast<void*>(first), last - first, vec.data()) != 0) return -1;
  int64_t n = 0;
  for (unsigned char v : vec) n += v & 1;
  return n;
}

// The pages wholly inside elements [begin, end) of an f32 buffer.
int64_t WholePages(const Tensor& buf, int64_t begin, int64_t end) {
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t b = reinterpret_cast<uintptr_t>(buf.data<float>() + begin);
  const uintptr_t e = reinterpret_cast<uintptr_t>(buf.data<float>() + end);
  const uintptr_t first = (b + page - 1) / page * page, last = e / page * page;
  return last <= first ? 0 : static_cast<int64_t>((last - first) / page);
}

// A decoder-shaped arena: the table, two layers and the head, 8192 elements each (32 KiB).
ParameterLayout DecoderLayout() {
  std::vector<ParameterSpec> specs = {{"tok_embeddings.weight", {8192}, DType::kF32, {}},
                                      {"layers.0.w", {8192}, DType::kF32, {}},
                                      {"layers.1.w", {8192}, DType::kF32, {}},
                                      {"norm.weight", {4096}, DType::kF32, {}},
                                      {"output.weight", {4096}, DType::kF32, {}}};
  return *ParameterLayout::Create(specs);
}

// Per-layer units on 1 to 5 ranks (3 and 5 do not divide the units: uneven shards): the
// foreign shards' pages are handed back until a unit is used, gathered (with the owners'
// values) before it, released after it; gradients are reduce-scattered per unit, summed,
// accumulated over calls and their pages released.
TEST(FsdpTest, LayerShardedArenaGathersAndReleasesUnits) {
  for (int n : {1, 2, 3, 4, 5}) {
    std::vector<std::string> failures(n);
    OnRanks(n, [&](ProcessGroup& g) {
      const ParameterLayout layout = DecoderLayout().PadBuffersTo(n);
      ParameterArena params = *ParameterArena::Allocate(layout, Device::Cpu());
      ParameterArena grads = *ParameterArena::Allocate(layout, Device::Cpu());
      float* p = params.buffers()[0].data<float>();
      for (int64_t i = 0; i < layout.buffers()[0].numel; ++i) p[i] = static_cast<float>(i);
      auto made = LayerShardedArena::Create(&g, params, grads, 2, false, true);
      ASSERT_TRUE(made.ok()) << made.status();
      LayerShardedArena& l = **made;
      ASSERT_EQ(l.num_units(), 4);
      const std::vector<ParamBuffer> buffers = l.OptimizerBuffers();
      ASSERT_EQ(buffers.size(), 4u);
      EXPECT_EQ(buffers[1].name, "unit1_f32");
      // Unit 1 (layers.0) spans [8192, 16384); this rank owns [8192 + r*stride, + c): stride
      // ceil(8192 / n), c the stride but for the last ranks (n = 3: 2731, 2731, 2730).
      const int64_t stride = (8192 + n - 1) / n;
      const int64_t c = std::max<int64_t>(0, std::min<int64_t>(stride, 8192 - g.rank() * stride));
      ASSERT_EQ(buffers[1].param.numel(), c);
      const ShardSpan span = l.ShardSpans().at("unit1_f32");
      EXPECT_EQ(span.stride, stride);
      EXPECT_EQ(span.numel, c);
      const Tensor& pb = params.buffers()[0];
      const int64_t own = 8192 + g.rank() * stride;
      if (n > 1) {
        EXPECT_EQ(ResidentPages(pb, 8192, own), 0);
        EXPECT_EQ(ResidentPages(pb, own + c, 16384), 0);
      }
      EXPECT_EQ(ResidentPages(pb, own, own + c), WholePages(pb, own, own + c));
      EXPECT_EQ(l.ResidentForeignElements(), 0);
      // Forward over the table and layer 0: unit 1 gathered with the owners' values.
      ASSERT_TRUE(l.BeforeStage(-1, false).ok());
      ASSERT_TRUE(l.BeforeStage(0, false).ok());
      for (int64_t i = 8192; i < 16384; ++i) {
        if (p[i] != static_cast<float>(i)) {
          failures[g.rank()] = absl::StrCat("element ", i, " is ", p[i]);
          break;
        }
      }
      // reshard_after_forward: the table's foreign shards went back at layer 0; unit 1 is
      // resident (unit 2's gather is in flight).
      EXPECT_EQ(l.ResidentForeignElements(), 8192 - c);
      if (n > 1) {
        EXPECT_EQ(ResidentPages(pb, 0, g.rank() * stride), 0);
        EXPECT_EQ(ResidentPages(pb, g.rank() * stride + c, 8192), 0);
      }
      // Gradients of layer 0, from two calls (micro-batches): summed over ranks, accumulated.
      float* gp = grads.buffers()[0].data<float>();
      for (int call = 0; call < 2; ++call) {
        for (int64_t i = 8192; i < 16384; ++i) gp[i] = 1.0f + g.rank();
        ASSERT_TRUE(l.GradientsReady(0).ok());  // the reduce-scatter started
        ASSERT_TRUE(l.FinishGradients().ok());
        for (int64_t i = 8192; i < 16384; ++i) ASSERT_EQ(gp[i], 0.0f);
      }
      const float want = 2.0f * n * (n + 1) / 2.0f;
      for (int64_t i = 0; i < c; ++i) ASSERT_EQ(buffers[1].grad.data<float>()[i], want);
      // After the update every foreign shard goes back; a save gathers them all.
      buffers[1].param.data<float>()[0] = -1.0f;
      ASSERT_TRUE(l.ReleaseAll().ok());
      EXPECT_EQ(l.ResidentForeignElements(), 0);
      ASSERT_TRUE(l.GatherAll().ok());
      for (int r = 0; r < n; ++r) EXPECT_EQ(p[8192 + r * stride], -1.0f);
      // The head unit (norm + output, 8192 elements plus the buffer's padding to n) too.
      for (int64_t i = 3 * 8192; i < 4 * 8192; ++i) {
        if (p[i] != static_cast<float>(i)) {
          failures[g.rank()] = absl::StrCat("head element ", i, " is ", p[i]);
          break;
        }
      }
    });
    for (int r = 0; r < n; ++r) EXPECT_EQ(failures[r], "") << "world " << n << " rank " << r;
  }
}

TEST(FsdpTest, LayerShardedArenaRefusesWhatItCannotCut) {
  ThreadWorld world(3);
  ThreadGroup g(&world, 0);
  // Two buffers (f32 and bf16): per-layer units need one.
  std::vector<ParameterSpec> specs = {{"tok_embeddings.weight", {64}, DType::kF32, {}},
                                      {"layers.0.w", {64}, DType::kBF16, {}},
                                      {"norm.weight", {64}, DType::kF32, {}}};
  ParameterArena p = *ParameterArena::Allocate(*ParameterLayout::Create(specs), Device::Cpu());
  auto l = LayerShardedArena::Create(&g, p, p, 1, false, true);
  ASSERT_FALSE(l.ok());
  EXPECT_THAT(l.status().message(), HasSubstr("has 2 buffers"));
  auto frozen = LayerShardedArena::CreateFrozen(&g, p, 1, false, true, {});
  ASSERT_FALSE(frozen.ok());
  EXPECT_THAT(frozen.status().message(), HasSubstr("the arena has 2 buffers"));
}

// A frozen base (LoRA) on 2 ranks: no gradients; the foreign shards' pages go back except the
// ranges kept resident (the adapters), which keep their values; a gather restores the rest.
TEST(FsdpTest, FrozenArenaKeepsTheResidentRanges) {
  std::vector<std::string> failures(2);
  OnRanks(2, [&](ProcessGroup& g) {
    const ParameterLayout layout = DecoderLayout();
    ParameterArena params = *ParameterArena::Allocate(layout, Device::Cpu());
    float* p = params.buffers()[0].data<float>();
    for (int64_t i = 0; i < layout.buffers()[0].numel; ++i) p[i] = static_cast<float>(i);
    // Unit 1 is [8192, 16384): rank 0 owns its first half, rank 1 its second; keep 2048
    // elements at the start of each half.
    auto made = LayerShardedArena::CreateFrozen(&g, params, 2, false, true,
                                                {{12288, 14336}, {8192, 10240}});
    ASSERT_TRUE(made.ok()) << made.status();
    LayerShardedArena& l = **made;
    const Tensor& pb = params.buffers()[0];
    const int64_t foreign = g.rank() == 0 ? 12288 : 8192;
    EXPECT_EQ(ResidentPages(pb, foreign, foreign + 2048), WholePages(pb, foreign, foreign + 2048));
    EXPECT_EQ(ResidentPages(pb, foreign + 2048, foreign + 4096), 0);
    for (int64_t i = foreign; i < foreign + 2048; ++i) {
      if (p[i] != static_cast<float>(i)) failures[g.rank()] = absl::StrCat("kept ", i, " is ", p[i]);
    }
    ASSERT_TRUE(l.BeforeStage(-1, false).ok());
    ASSERT_TRUE(l.BeforeStage(0, false).ok());
    for (int64_t i = 8192; i < 16384; ++i) {
      if (p[i] != static_cast<float>(i)) {
        failures[g.rank()] = absl::StrCat("gathered ", i, " is ", p[i]);
        break;
      }
    }
    // Backward: no gradients to reduce; the unit is released again.
    ASSERT_TRUE(l.BeforeStage(0, true).ok());
    ASSERT_TRUE(l.GradientsReady(0).ok());
    ASSERT_TRUE(l.FinishGradients().ok());
    EXPECT_EQ(ResidentPages(pb, foreign + 2048, foreign + 4096), 0);
    ASSERT_TRUE(l.ReleaseAll().ok());
    EXPECT_EQ(l.ResidentForeignElements(), 0);
  });
  EXPECT_EQ(failures[0], "");
  EXPECT_EQ(failures[1], "");
}

std::vector<Tensor> Shards(const std::vector<float>& full, int n) {
  const int64_t c = ShardNumel(static_cast<int64_t>(full.size()), n);
  std::vector<Tensor> out;
  for (int r = 0; r < n; ++r) {
    Tensor t = *Tensor::Zeros({c}, DType::kF32);
    for (int64_t i = 0; i < c && r * c + i < static_cast<int64_t>(full.size()); ++i) {
      t.data<float>()[i] = full[r * c + i];
    }
    out.push_back(t);
  }
  return out;
}

// Saved at any of 1..5 ranks, loaded at any of 1..5: the concatenated new shards are the
// original elements, zero padded.
TEST(FsdpTest, ReshardOptimizerStateBetweenWorldSizes) {
  std::vector<float> exp_avg(37), exp_avg_sq(37);
  for (int i = 0; i < 37; ++i) {
    exp_avg[i] = 0.5f + i;
    exp_avg_sq[i] = 1000.0f - i;
  }
  for (int old_n = 1; old_n <= 5; ++old_n) {
    std::vector<OptimizerState> old;
    const std::vector<Tensor> a = Shards(exp_avg, old_n), b = Shards(exp_avg_sq, old_n);
    for (int r = 0; r < old_n; ++r) {
      OptimizerState s;
      s.name = "adamw";
      s.step = 9;
      s.hyperparameters["lr"] = 0.01;
      s.tensors["buffer0_f32.exp_avg"] = a[r];
      s.tensors["buffer0_f32.exp_avg_sq"] = b[r];
      old.push_back(s);
    }
    for (int n = 1; n <= 5; ++n) {
      const int64_t c = ShardNumel(37, n);
      for (int r = 0; r < n; ++r) {
        auto mine = ReshardOptimizerState(old, {{"buffer0_f32", c}}, r, n);
        ASSERT_TRUE(mine.ok()) << mine.status();
        EXPECT_EQ(mine->step, 9);
        EXPECT_EQ(mine->hyperparameters.at("lr"), 0.01);
        const std::vector<float> got = *mine->tensors.at("buffer0_f32.exp_avg").ToFloatVector();
        const std::vector<float> got_sq =
            *mine->tensors.at("buffer0_f32.exp_avg_sq").ToFloatVector();
        ASSERT_EQ(static_cast<int64_t>(got.size()), c);
        for (int64_t i = 0; i < c; ++i) {
          const int64_t at = r * c + i;
          EXPECT_EQ(got[i], at < 37 ? exp_avg[at] : 0.0f) << old_n << "->" << n;
          EXPECT_EQ(got_sq[i], at < 37 ? exp_avg_sq[at] : 0.0f);
        }
      }
    }
  }
}

// Uneven shards (per-layer units that N does not divide): 10 elements saved at 3 ranks as
// 4, 4, 2, and at 4 ranks as 3, 3, 3, 1; loaded at 1 to 5 ranks of stride ceil(10 / n).
TEST(FsdpTest, ReshardUnevenShards) {
  std::vector<float> full(10);
  for (int i = 0; i < 10; ++i) full[i] = 1.0f + i;
  for (int old_n = 1; old_n <= 5; ++old_n) {
    const int64_t old_stride = (10 + old_n - 1) / old_n;
    std::vector<Tensor> old;
    for (int r = 0; r < old_n; ++r) {
      const int64_t begin = std::min<int64_t>(10, r * old_stride);
      const int64_t count = std::min<int64_t>(10, begin + old_stride) - begin;
      Tensor t = *Tensor::Zeros({count}, DType::kF32);
      for (int64_t i = 0; i < count; ++i) t.data<float>()[i] = full[begin + i];
      old.push_back(t);
    }
    for (int n = 1; n <= 5; ++n) {
      const int64_t stride = (10 + n - 1) / n;
      for (int r = 0; r < n; ++r) {
        const int64_t begin = std::min<int64_t>(10, r * stride);
        const int64_t count = std::min<int64_t>(10, begin + stride) - begin;
        auto got = ReshardTensor(old, ShardSpan{stride, count}, r, n);
        ASSERT_TRUE(got.ok()) << got.status();
        ASSERT_EQ(got->numel(), count);
        for (int64_t i = 0; i < count; ++i) {
          EXPECT_EQ(got->data<float>()[i], full[begin + i]) << old_n << "->" << n << " rank " << r;
        }
      }
    }
  }
}

TEST(FsdpTest, ReshardErrorsNameTheProblem) {
  OptimizerState s0, s1;
  s0.name = s1.name = "adamw";
  s0.tensors["buffer0_f32.exp_avg"] = *Tensor::Zeros({4}, DType::kF32);
  s1.tensors["buffer0_f32.exp_avg"] = *Tensor::Zeros({4}, DType::kF32);
  EXPECT_THAT(ReshardOptimizerState({s0, s1}, {{"buffer1_bf16", 8}}, 0, 1).status().message(),
              HasSubstr("buffer0_f32, which this model lacks"));
  s1.step = 3;
  EXPECT_THAT(ReshardOptimizerState({s0, s1}, {{"buffer0_f32", 8}}, 0, 1).status().message(),
              HasSubstr("rank 1 (adamw, step 3"));
  OptimizerState q0 = s0, q1 = s0;
  q0.tensors["buffer0_f32.exp_avg"] = *Tensor::Zeros({4}, DType::kI32);
  q1.tensors["buffer0_f32.exp_avg"] = *Tensor::Zeros({4}, DType::kI32);
  const absl::Status packed = ReshardOptimizerState({q0, q1}, {{"buffer0_f32", 8}}, 0, 1).status();
  EXPECT_EQ(packed.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(packed.message(), HasSubstr("at the world size it was saved at (2 ranks)"));
  // Elements past the new shards must be padding.
  Tensor big = *Tensor::Zeros({4}, DType::kF32);
  big.data<float>()[3] = 1.0f;
  EXPECT_THAT(ReshardTensor({big}, 1, 0, 2).status().message(), HasSubstr("element 3"));
}

}  // namespace
}  // namespace cctune
