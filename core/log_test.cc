#include "core/log.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cctune {
namespace {

using ::testing::HasSubstr;

TEST(LogTest, ParsesLevelsInAnyCase) {
  EXPECT_EQ(*ParseLogLevel("debug"), LogLevel::kDebug);
  EXPECT_EQ(*ParseLogLevel("INFO"), LogLevel::kInfo);
  EXPECT_EQ(*ParseLogLevel("Warning"), LogLevel::kWarning);
  EXPECT_EQ(*ParseLogLevel("error"), LogLevel::kError);
  absl::StatusOr<LogLevel> bad = ParseLogLevel("verbose");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("'verbose'"));
  EXPECT_THAT(bad.status().message(), HasSubstr("DEBUG, INFO, WARNING, ERROR"));
}

TEST(LogTest, DropsMessagesBelowTheLevel) {
  SetLogLevel(LogLevel::kWarning);
  ::testing::internal::CaptureStderr();
  LogInfo("info %d", 1);
  LogWarning("warning %d", 2);
  LogDebug("debug %d", 3);
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(err, "warning 2\n");
  SetLogLevel(LogLevel::kDebug);
  ::testing::internal::CaptureStderr();
  LogDebug("debug %s", std::string(300, 'x').c_str());  // longer than the first buffer
  err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(err, "debug " + std::string(300, 'x') + "\n");
  SetLogLevel(LogLevel::kInfo);
}

}  // namespace
}  // namespace cctune
