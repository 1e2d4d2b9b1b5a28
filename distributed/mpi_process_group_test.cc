// Run on 2 ranks by mpirun (cctune_mpi_test). Every rank regenerates every rank's input from
// its seed and checks the collective's result against a local reference: the plumbing (chunk
// ownership, gathers, in-place buffers) bit for bit against ReduceBlocks, whose arithmetic
// distributed/local_reduce_test checks against exact references; f32 sums of two ranks also
// against IEEE addition directly.
#include "distributed/mpi_process_group.h"

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/random.h"
#include "core/tensor.h"
#include "distributed/local_reduce.h"
#include "distributed/process_group.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cctune {
namespace {

using ::testing::HasSubstr;

constexpr DType kDTypes[] = {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64};
constexpr int64_t kSizes[] = {1, 7, 1000, 4097};

ProcessGroup& World() {
  static ProcessGroup* const pg = [] {
    auto env = ReadDistributedEnv();
    CCTUNE_CHECK_OK(env);
    ProcessGroupOptions options;
    options.timeout_seconds = 60;
    auto group = CreateProcessGroup(*env, options, Device::Cpu());
    CCTUNE_CHECK_OK(group);
    return group->release();
  }();
  return *pg;
}

// Rank `rank`'s input of case `seed`: N(0, 1) floats, or integers over the whole range (sums
// wrap).
Tensor Input(uint64_t seed, int rank, int64_t numel, DType dtype) {
  Generator gen(seed * 1000 + rank);
  if (IsFloating(dtype)) {
    auto t = RandomNormal({numel}, dtype, gen);
    CCTUNE_CHECK_OK(t);
    return *t;
  }
  auto t = Tensor::Empty({numel}, dtype);
  CCTUNE_CHECK_OK(t);
  for (int64_t i = 0; i < numel; ++i) {
    if (dtype == DType::kI32) {
      t->data<int32_t>()[i] = static_cast<int32_t>(gen.NextUint32());
    } else {
      t->data<int64_t>()[i] = static_cast<int64_t>(gen.NextUint64());
    }
  }
  return *t;
}

// Every rank's input of `seed` side by side: block r is rank r's.
std::vector<char> AllInputs(uint64_t seed, int world, int64_t numel, DType dtype) {
  std::vector<char> blocks;
  for (int r = 0; r < world; ++r) {
    Tensor t = Input(seed, r, numel, dtype);
    const char* p = static_cast<const char*>(t.raw_data());
    blocks.insert(blocks.end(), p, p + t.nbytes());
  }
  return blocks;
}

bool SameBytes(const Tensor& t, const void* expected, size_t nbytes) {
  return t.nbytes() == nbytes && std::memcmp(t.raw_data(), expected, nbytes) == 0;
}

std::vector<ReduceOp> OpsFor(DType dtype) {
  if (IsFloating(dtype)) return {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax};
  return {ReduceOp::kSum, ReduceOp::kMax};
}

std::string Case(DType dtype, int64_t n, ReduceOp op) {
  return absl::StrCat(DTypeName(dtype), " n=", n, " ", ReduceOpName(op));
}

TEST(MpiProcessGroupTest, WorldComesFromMpirun) {
  auto env = ReadDistributedEnv();
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->source, "OpenMPI");
  EXPECT_EQ(World().world_size(), 2);
  EXPECT_EQ(World().rank(), env->rank);
  EXPECT_STREQ(World().backend(), "mpi");
}

TEST(MpiProcessGroupTest, AllReduceEveryDTypeSizeAndOp) {
  ProcessGroup& pg = World();
  uint64_t seed = 1;
  for (DType dtype : kDTypes) {
    for (int64_t n : kSizes) {
      for (ReduceOp op : OpsFor(dtype)) {
        ++seed;
        Tensor t = Input(seed, pg.rank(), n, dtype);
        ASSERT_TRUE(pg.AllReduce(t, op).ok()) << Case(dtype, n, op);
        std::vector<char> blocks = AllInputs(seed, pg.world_size(), n, dtype);
        std::vector<char> expected(t.nbytes());
        ReduceBlocks(blocks.data(), pg.world_size(), n, n, dtype, op, expected.data());
        EXPECT_TRUE(SameBytes(t, expected.data(), expected.size())) << Case(dtype, n, op);
        if (dtype == DType::kF32 && op == ReduceOp::kSum) {
          const float* a = reinterpret_cast<const float*>(blocks.data());
          for (int64_t i = 0; i < n; ++i) {
            ASSERT_EQ(t.data<float>()[i], a[i] + a[n + i]) << Case(dtype, n, op) << " @" << i;
          }
        }
      }
    }
  }
}

TEST(MpiProcessGroupTest, ReduceScatterEveryDTypeSizeAndOp) {
  ProcessGroup& pg = World();
  const int world = pg.world_size();
  uint64_t seed = 100;
  for (DType dtype : kDTypes) {
    for (int64_t n : kSizes) {
      for (ReduceOp op : OpsFor(dtype)) {
        ++seed;
        Tensor input = Input(seed, pg.rank(), n * world, dtype);
        auto output = Tensor::Empty({n}, dtype);
        ASSERT_TRUE(output.ok());
        ASSERT_TRUE(pg.ReduceScatter(input, *output, op).ok()) << Case(dtype, n, op);
        // Chunk rank() of every rank's input: block r of rank r's data starts at r*world*n.
        std::vector<char> blocks = AllInputs(seed, world, n * world, dtype);
        const size_t es = DTypeSize(dtype);
        std::vector<char> expected(n * es);
        ReduceBlocks(blocks.data() + pg.rank() * n * es, world, n * world, n, dtype, op,
                     expected.data());
        EXPECT_TRUE(SameBytes(*output, expected.data(), expected.size())) << Case(dtype, n, op);
      }
    }
  }
}

TEST(MpiProcessGroupTest, AllGatherAndInPlace) {
  ProcessGroup& pg = World();
  const int world = pg.world_size();
  uint64_t seed = 200;
  for (DType dtype : kDTypes) {
    for (int64_t n : kSizes) {
      ++seed;
      Tensor input = Input(seed, pg.rank(), n, dtype);
      auto output = Tensor::Zeros({world, n}, dtype);
      ASSERT_TRUE(output.ok());
      ASSERT_TRUE(pg.AllGather(input, *output).ok());
      std::vector<char> expected = AllInputs(seed, world, n, dtype);
      EXPECT_TRUE(SameBytes(*output, expected.data(), expected.size()))
          << DTypeName(dtype) << " n=" << n;
      // In place: the input is this rank's chunk of the output.
      auto again = Tensor::Zeros({world * n}, dtype);
      ASSERT_TRUE(again.ok());
      auto chunk = again->Narrow(0, pg.rank() * n, n);
      ASSERT_TRUE(chunk.ok());
      ASSERT_TRUE(chunk->CopyFrom(input).ok());
      ASSERT_TRUE(pg.AllGather(*chunk, *again).ok());
      EXPECT_TRUE(SameBytes(*again, expected.data(), expected.size()))
          << "in place " << DTypeName(dtype) << " n=" << n;
    }
  }
}

TEST(MpiProcessGroupTest, BroadcastFromEachRoot) {
  ProcessGroup& pg = World();
  for (int root = 0; root < pg.world_size(); ++root) {
    for (DType dtype : kDTypes) {
      const uint64_t seed = 300 + root;
      Tensor t = Input(seed, pg.rank(), 1001, dtype);
      ASSERT_TRUE(pg.Broadcast(t, root).ok());
      Tensor expected = Input(seed, root, 1001, dtype);
      EXPECT_TRUE(SameBytes(t, expected.raw_data(), expected.nbytes()))
          << "root " << root << " " << DTypeName(dtype);
    }
  }
  EXPECT_TRUE(pg.Barrier().ok());
}

// Two runs of the same reduction give the same bits, and every rank holds the same bits.
TEST(MpiProcessGroupTest, RepeatedRunsAndRanksAreBitIdentical) {
  ProcessGroup& pg = World();
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    Tensor first = Input(400, pg.rank(), 3333, dtype);
    Tensor second = Input(400, pg.rank(), 3333, dtype);
    ASSERT_TRUE(pg.AllReduce(first, ReduceOp::kAvg).ok());
    ASSERT_TRUE(pg.AllReduce(second, ReduceOp::kAvg).ok());
    EXPECT_TRUE(SameBytes(first, second.raw_data(), second.nbytes())) << DTypeName(dtype);
    auto gathered = Tensor::Empty({pg.world_size(), 3333}, dtype);
    ASSERT_TRUE(gathered.ok());
    ASSERT_TRUE(pg.AllGather(first, *gathered).ok());
    const char* g = static_cast<const char*>(gathered->raw_data());
    for (int r = 1; r < pg.world_size(); ++r) {
      EXPECT_EQ(std::memcmp(g, g + r * first.nbytes(), first.nbytes()), 0)
          << "rank " << r << " differs from rank 0, " << DTypeName(dtype);
    }
  }
}

// Started collectives run on the worker thread while this one computes; Wait in any order.
TEST(MpiProcessGroupTest, StartedCollectivesOverlapAndComplete) {
  ProcessGroup& pg = World();
  const int world = pg.world_size();
  const int64_t n = 50001;
  std::vector<Tensor> inputs, outputs;
  std::vector<std::unique_ptr<Work>> works;
  for (int i = 0; i < 4; ++i) {
    inputs.push_back(Input(500 + i, pg.rank(), i % 2 == 0 ? n : n * world, DType::kBF16));
    auto out = Tensor::Empty({i % 2 == 0 ? n * world : n}, DType::kBF16);
    ASSERT_TRUE(out.ok());
    outputs.push_back(*out);
    auto work = i % 2 == 0 ? pg.StartAllGather(inputs[i], outputs[i])
                           : pg.StartReduceScatter(inputs[i], outputs[i], ReduceOp::kSum);
    ASSERT_TRUE(work.ok()) << work.status();
    works.push_back(std::move(*work));
  }
  double busy = 0;  // compute meanwhile
  for (int i = 0; i < 2000000; ++i) busy += 1.0 / (i + 1);
  EXPECT_GT(busy, 1.0);
  for (int i = 3; i >= 0; --i) ASSERT_TRUE(works[i]->Wait().ok()) << i;
  for (int i = 0; i < 4; ++i) {
    const size_t es = DTypeSize(DType::kBF16);
    if (i % 2 == 0) {
      std::vector<char> expected = AllInputs(500 + i, world, n, DType::kBF16);
      EXPECT_TRUE(SameBytes(outputs[i], expected.data(), expected.size())) << i;
    } else {
      std::vector<char> blocks = AllInputs(500 + i, world, n * world, DType::kBF16);
      std::vector<char> expected(n * es);
      ReduceBlocks(blocks.data() + pg.rank() * n * es, world, n * world, n, DType::kBF16,
                   ReduceOp::kSum, expected.data());
      EXPECT_TRUE(SameBytes(outputs[i], expected.data(), expected.size())) << i;
    }
  }
  EXPECT_TRUE(works[0]->Wait().ok());  // a second Wait returns the same
}

TEST(MpiProcessGroupTest, BadArgumentsAreClearErrorsBeforeAnyMessage) {
  ProcessGroup& pg = World();
  auto a = Tensor::Zeros({10}, DType::kF32);
  auto b = Tensor::Zeros({15}, DType::kF32);
  auto i = Tensor::Zeros({4}, DType::kI32);
  ASSERT_TRUE(a.ok() && b.ok() && i.ok());
  EXPECT_THAT(pg.AllGather(*a, *b).message(),
              HasSubstr("all_gather: the per-rank tensor has 10 f32 elements and the full one 15"));
  EXPECT_THAT(pg.ReduceScatter(*a, *b, ReduceOp::kSum).message(), HasSubstr("reduce_scatter"));
  EXPECT_THAT(pg.AllReduce(*i, ReduceOp::kAvg).message(),
              HasSubstr("all_reduce: avg of a i32 tensor is not defined"));
  EXPECT_THAT(pg.Broadcast(*a, 5).message(), HasSubstr("root rank 5 is not in a world of 2"));
  auto t = a->View({2, 5});
  auto strided = t->Transpose(0, 1);
  ASSERT_TRUE(strided.ok());
  EXPECT_THAT(pg.AllReduce(*strided, ReduceOp::kSum).message(), HasSubstr("not contiguous"));
  EXPECT_EQ(pg.AllReduce(*strided, ReduceOp::kSum).code(), absl::StatusCode::kInvalidArgument);
  // The group still works.
  EXPECT_TRUE(pg.Barrier().ok());
}

// Ranks that call different collectives fail on both sides, naming the other's call, before
// any data moves; only that group breaks.
TEST(MpiProcessGroupTest, MismatchedCollectivesNameBothCalls) {
  auto env = ReadDistributedEnv();
  ASSERT_TRUE(env.ok());
  ProcessGroupOptions options;
  options.backend = "mpi";
  options.timeout_seconds = 20;
  auto group = CreateProcessGroup(*env, options, Device::Cpu());
  ASSERT_TRUE(group.ok()) << group.status();
  ProcessGroup& pg = **group;
  auto small = Tensor::Zeros({6}, DType::kF32);
  auto big = Tensor::Zeros({12}, DType::kF32);
  ASSERT_TRUE(small.ok() && big.ok());
  absl::Status s = pg.rank() == 0 ? pg.AllReduce(*small, ReduceOp::kSum)
                                  : pg.AllGather(*small, *big);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  if (pg.rank() == 0) {
    EXPECT_THAT(s.message(), HasSubstr("all_reduce #1 (sum of 6 f32 elements) on rank 0: rank 1 "
                                       "called all_gather #1 (6 f32 elements per rank)"));
  } else {
    EXPECT_THAT(s.message(), HasSubstr("rank 0 called all_reduce #1"));
  }
  absl::Status later = pg.Barrier();
  EXPECT_THAT(later.message(), HasSubstr("barrier #2: the process group failed earlier"));
  EXPECT_TRUE(World().Barrier().ok());
}

}  // namespace
}  // namespace cctune
