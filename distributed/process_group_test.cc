#include "distributed/process_group.h"

#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cctune {
namespace {

using ::testing::HasSubstr;

std::function<const char*(const char*)> FakeEnv(const std::map<std::string, std::string>& vars) {
  return [vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

TEST(ReadDistributedEnvTest, NoLauncherIsAWorldOfOne) {
  auto env = ReadDistributedEnv(FakeEnv({}));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->rank, 0);
  EXPECT_EQ(env->world_size, 1);
  EXPECT_EQ(env->source, "none");
}

TEST(ReadDistributedEnvTest, OpenMpiWinsOverTorchrun) {
  auto env = ReadDistributedEnv(FakeEnv({{"OMPI_COMM_WORLD_RANK", "1"},
                                         {"OMPI_COMM_WORLD_SIZE", "4"},
                                         {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                         {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                                         {"RANK", "3"},
                                         {"WORLD_SIZE", "8"}}));
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(env->source, "OpenMPI");
  EXPECT_EQ(env->rank, 1);
  EXPECT_EQ(env->world_size, 4);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->local_world_size, 2);
}

TEST(ReadDistributedEnvTest, TorchrunAndSlurm) {
  auto torchrun = ReadDistributedEnv(FakeEnv({{"RANK", "2"}, {"WORLD_SIZE", "3"}}));
  ASSERT_TRUE(torchrun.ok()) << torchrun.status();
  EXPECT_EQ(torchrun->source, "torchrun");
  EXPECT_EQ(torchrun->local_rank, 2);  // defaults to the global figures
  auto slurm = ReadDistributedEnv(FakeEnv({{"SLURM_PROCID", "5"},
                                           {"SLURM_NTASKS", "8"},
                                           {"SLURM_LOCALID", "1"},
                                           {"SLURM_NTASKS_PER_NODE", "4(x2)"}}));
  ASSERT_TRUE(slurm.ok()) << slurm.status();
  EXPECT_EQ(slurm->source, "Slurm");
  EXPECT_EQ(slurm->rank, 5);
  EXPECT_EQ(slurm->local_world_size, 4);
}

TEST(ReadDistributedEnvTest, BadValuesNameTheVariable) {
  auto not_number = ReadDistributedEnv(FakeEnv({{"RANK", "x1"}, {"WORLD_SIZE", "2"}}));
  EXPECT_THAT(not_number.status().message(), HasSubstr("RANK=\"x1\""));
  auto too_big = ReadDistributedEnv(FakeEnv({{"RANK", "2"}, {"WORLD_SIZE", "2"}}));
  EXPECT_THAT(too_big.status().message(), HasSubstr("RANK=2 is not below WORLD_SIZE=2"));
  auto half = ReadDistributedEnv(FakeEnv({{"RANK", "0"}}));
  EXPECT_THAT(half.status().message(), HasSubstr("WORLD_SIZE is not set"));
}

TEST(SingleProcessGroupTest, CollectivesOfAWorldOfOne) {
  auto pg = CreateProcessGroup(DistributedEnv{}, ProcessGroupOptions{}, Device::Cpu());
  ASSERT_TRUE(pg.ok()) << pg.status();
  EXPECT_STREQ((*pg)->backend(), "single");
  auto a = Tensor::Zeros({2, 3}, DType::kF32);
  auto b = Tensor::Zeros({6}, DType::kF32);
  ASSERT_TRUE(a.ok() && b.ok());
  for (int i = 0; i < 6; ++i) a->data<float>()[i] = static_cast<float>(i + 1);
  ASSERT_TRUE((*pg)->AllReduce(*a, ReduceOp::kAvg).ok());
  EXPECT_EQ(a->data<float>()[5], 6.0f);
  ASSERT_TRUE((*pg)->AllGather(*a, *b).ok());
  EXPECT_EQ(b->ToFloatVector().value(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  auto c = Tensor::Zeros({6}, DType::kF32);
  auto work = (*pg)->StartReduceScatter(*b, *c, ReduceOp::kSum);
  ASSERT_TRUE(work.ok());
  ASSERT_TRUE((*work)->Wait().ok());
  EXPECT_EQ(c->data<float>()[2], 3.0f);
  EXPECT_FALSE((*pg)->Broadcast(*a, 1).ok());
  auto wrong = Tensor::Zeros({5}, DType::kF32);
  EXPECT_THAT((*pg)->AllGather(*a, *wrong).message(), HasSubstr("all_gather: input has 6"));
}

TEST(CreateProcessGroupTest, UnknownBackendIsNamed) {
  ProcessGroupOptions options;
  options.backend = "gloo";
  DistributedEnv env;
  env.world_size = 2;
  auto pg = CreateProcessGroup(env, options, Device::Cpu());
  EXPECT_EQ(pg.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(pg.status().message(), HasSubstr("\"gloo\" is not in this build"));
  options.backend = "single";
  EXPECT_THAT(CreateProcessGroup(env, options, Device::Cpu()).status().message(),
              HasSubstr("cannot serve a world of 2"));
}

}  // namespace
}  // namespace cctune
