#include "recipes/launcher.h"

#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cctune {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> Args(std::initializer_list<const char*> a) {
  return std::vector<std::string>(a.begin(), a.end());
}

TEST(ParseLaunchFlagsTest, TakesTheLauncherFlagsUpToTheRecipe) {
  auto args = Args({"--nproc_per_node", "2", "full_finetune_distributed", "--config", "c.yaml",
                    "batch_size=4"});
  auto opts = ParseLaunchFlags(&args);
  ASSERT_TRUE(opts.ok()) << opts.status();
  EXPECT_EQ(opts->nproc_per_node, 2);
  EXPECT_EQ(opts->nnodes, 1);
  EXPECT_TRUE(NeedsLauncher(*opts));
  EXPECT_THAT(args, ElementsAre("full_finetune_distributed", "--config", "c.yaml", "batch_size=4"));

  auto spelled = Args({"--nproc-per-node=3", "--nnodes=2", "--hostfile", "hosts", "r"});
  opts = ParseLaunchFlags(&spelled);
  ASSERT_TRUE(opts.ok()) << opts.status();
  EXPECT_EQ(opts->nproc_per_node, 3);
  EXPECT_EQ(opts->nnodes, 2);
  EXPECT_EQ(opts->hostfile, "hosts");
  EXPECT_THAT(spelled, ElementsAre("r"));
}

TEST(ParseLaunchFlagsTest, NoFlagsAndOneProcessRunInThisProcess) {
  auto args = Args({"generate", "--config", "demo/generation"});
  auto opts = ParseLaunchFlags(&args);
  ASSERT_TRUE(opts.ok());
  EXPECT_FALSE(NeedsLauncher(*opts));
  EXPECT_EQ(args.size(), 3u);
  auto one = Args({"--nproc_per_node", "1", "generate"});
  opts = ParseLaunchFlags(&one);
  ASSERT_TRUE(opts.ok());
  EXPECT_FALSE(NeedsLauncher(*opts));
  EXPECT_THAT(one, ElementsAre("generate"));
}

TEST(ParseLaunchFlagsTest, BadValuesNameTheFlag) {
  for (const char* bad : {"0", "-2", "two", ""}) {
    auto args = Args({"--nproc_per_node", bad, "r"});
    auto opts = ParseLaunchFlags(&args);
    ASSERT_FALSE(opts.ok()) << bad;
    EXPECT_THAT(opts.status().message(),
                HasSubstr(std::string("--nproc_per_node must be a whole number of at least 1, got '") +
                          bad + "'"));
  }
  auto no_value = Args({"--nproc_per_node"});
  EXPECT_THAT(ParseLaunchFlags(&no_value).status().message(), HasSubstr("needs a value"));
  auto nodes_alone = Args({"--nnodes", "2", "r"});
  EXPECT_THAT(ParseLaunchFlags(&nodes_alone).status().message(),
              HasSubstr("need --nproc_per_node N"));
}

LaunchHost Host(bool root, int cores) {
  LaunchHost h;
  h.mpirun = "/usr/bin/mpirun";
  h.self_exe = "/opt/cctune/bin/cctune";
  h.is_root = root;
  h.cores = cores;
  return h;
}

TEST(MpirunCommandTest, OneNode) {
  LaunchOptions o;
  o.nproc_per_node = 2;
  auto argv = MpirunCommand(o, Host(false, 16), Args({"lora_finetune_distributed", "--config", "x"}));
  ASSERT_TRUE(argv.ok()) << argv.status();
  EXPECT_THAT(*argv, ElementsAre("/usr/bin/mpirun", "-np", "2", "--bind-to", "none", "-x",
                                 "OMP_NUM_THREADS=8", "/opt/cctune/bin/cctune", "run",
                                 "lora_finetune_distributed", "--config", "x"));
}

TEST(MpirunCommandTest, RootAndMoreRanksThanCores) {
  LaunchOptions o;
  o.nproc_per_node = 4;
  LaunchHost h = Host(true, 2);
  h.omp_threads_set = true;  // the user's OMP_NUM_THREADS is kept
  auto argv = MpirunCommand(o, h, Args({"r"}));
  ASSERT_TRUE(argv.ok()) << argv.status();
  EXPECT_THAT(*argv, ElementsAre("/usr/bin/mpirun", "-np", "4", "--allow-run-as-root",
                                 "--oversubscribe", "--bind-to", "none", "/opt/cctune/bin/cctune",
                                 "run", "r"));
}

TEST(MpirunCommandTest, MultiNode) {
  LaunchOptions o;
  o.nproc_per_node = 8;
  o.nnodes = 2;
  o.hostfile = "hosts.txt";
  auto argv = MpirunCommand(o, Host(false, 64), Args({"r"}));
  ASSERT_TRUE(argv.ok()) << argv.status();
  EXPECT_THAT(*argv, ElementsAre("/usr/bin/mpirun", "-np", "16", "--bind-to", "none",
                                 "--hostfile", "hosts.txt", "--map-by", "ppr:8:node", "-x",
                                 "OMP_NUM_THREADS=8", "/opt/cctune/bin/cctune", "run", "r"));
  o.hostfile.clear();
  auto no_hosts = MpirunCommand(o, Host(false, 64), Args({"r"}));
  EXPECT_THAT(no_hosts.status().message(), HasSubstr("--nnodes 2 needs --hostfile <file>"));
  LaunchHost slurm = Host(false, 64);
  slurm.in_slurm = true;
  EXPECT_TRUE(MpirunCommand(o, slurm, Args({"r"})).ok());
}

TEST(FindMpirunTest, SearchesPathAndNamesThePackage) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp != nullptr ? tmp : "/tmp") + "/launcher_bin";
  ::mkdir(dir.c_str(), 0755);
  auto missing = FindMpirun("/nonexistent:" + dir);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("apt-get install openmpi-bin"));
  const std::string fake = dir + "/mpirun";
  std::ofstream(fake) << "#!/bin/sh\n";
  ::chmod(fake.c_str(), 0755);
  auto found = FindMpirun("/nonexistent:" + dir);
  ASSERT_TRUE(found.ok()) << found.status();
  char real[PATH_MAX];
  ASSERT_NE(::realpath(dir.c_str(), real), nullptr);
  EXPECT_EQ(*found, std::string(real) + "/mpirun");
  // Through a linked folder (like /bin -> /usr/bin): the real folder, never "/" + "bin".
  const std::string link = dir + "_link";
  ::unlink(link.c_str());
  ASSERT_EQ(::symlink(dir.c_str(), link.c_str()), 0);
  auto via_link = FindMpirun(link);
  ASSERT_TRUE(via_link.ok());
  EXPECT_EQ(*via_link, std::string(real) + "/mpirun");
}

}  // namespace
}  // namespace cctune
