#include "training/metric_logger_components.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "config/config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "training/tfrecord.h"

namespace cctune {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string TestDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp ? tmp : "/tmp", "/metric_logger_components_", name);
  fs::remove_all(dir);
  return dir;
}

absl::StatusOr<std::unique_ptr<MetricLogger>> Make(const std::string& yaml) {
  CCTUNE_CHECK_OK(RegisterMetricLoggers());
  absl::StatusOr<Config> cfg = Config::FromString(yaml, "logger.yaml");
  CCTUNE_CHECK_OK(cfg);
  return MetricLoggerRegistry().InstantiateKey(cfg->root(), "metric_logger");
}

TEST(MetricLoggerComponentsTest, TorchtuneDiskLoggerWritesJsonLines) {
  const std::string dir = TestDir("disk");
  auto logger = Make(
      absl::StrCat("metric_logger:\n  _component_: torchtune.training.metric_logging.DiskLogger\n"
                   "  log_dir: ",
                   dir, "/logs\n"));
  ASSERT_TRUE(logger.ok()) << logger.status();
  ASSERT_TRUE((*logger)->LogDict({{"loss", 1.5}}, 3).ok());
  ASSERT_TRUE((*logger)->Close().ok());
  std::ifstream in(dir + "/logs/metrics.jsonl");
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(ss.str(), "{\"step\":3,\"loss\":1.5}\n");
}

TEST(MetricLoggerComponentsTest, TensorBoardLoggerOrganizesRuns) {
  const std::string dir = TestDir("tb");
  auto logger = Make(absl::StrCat(
      "metric_logger:\n  _component_: torchtune.utils.metric_logging.TensorBoardLogger\n"
      "  log_dir: ",
      dir, "\n"));
  ASSERT_TRUE(logger.ok()) << logger.status();
  ASSERT_TRUE((*logger)->Log("loss", 2.0, 1).ok());
  ASSERT_TRUE((*logger)->Close().ok());
  int files = 0;
  for (const auto& run : fs::directory_iterator(dir)) {
    EXPECT_EQ(run.path().filename().string().rfind("run_0_", 0), 0u) << run.path();
    for (const auto& f : fs::directory_iterator(run.path())) {
      ++files;
      EXPECT_THAT(f.path().filename().string(), HasSubstr("events.out.tfevents."));
      auto records = ReadTFRecordFile(f.path().string());
      ASSERT_TRUE(records.ok()) << records.status();
      EXPECT_EQ(records->size(), 2u);
    }
  }
  EXPECT_EQ(files, 1);

  const std::string flat = TestDir("tb_flat");
  logger = Make(absl::StrCat(
      "metric_logger:\n  _component_: cctune.training.metric_logging.TensorBoardLogger\n"
      "  log_dir: ",
      flat, "\n  organize_logs: false\n"));
  ASSERT_TRUE(logger.ok()) << logger.status();
  EXPECT_EQ(std::distance(fs::directory_iterator(flat), fs::directory_iterator()), 1);
}

TEST(MetricLoggerComponentsTest, StdoutLoggerAndErrors) {
  EXPECT_TRUE(
      Make("metric_logger:\n  _component_: torchtune.training.metric_logging.StdoutLogger\n").ok());
  auto missing =
      Make("metric_logger:\n  _component_: torchtune.training.metric_logging.DiskLogger\n");
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("log_dir"));
  auto unknown =
      Make("metric_logger:\n  _component_: torchtune.training.metric_logging.WandBLogger\n");
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(std::string(unknown.status().message()), HasSubstr("WandBLogger"));
}

}  // namespace
}  // namespace cctune
