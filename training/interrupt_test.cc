#include "training/interrupt.h"

#include <signal.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cctune {
namespace {

TEST(InterruptHandlerTest, FirstSignalIsARequestNotAnExit) {
  InterruptHandler handler;
  EXPECT_EQ(handler.signal(), 0);
  ASSERT_EQ(raise(SIGTERM), 0);  // delivered before raise returns
  EXPECT_EQ(handler.signal(), SIGTERM);
}

TEST(InterruptHandlerTest, SigintIsRecordedToo) {
  InterruptHandler handler;
  ASSERT_EQ(raise(SIGINT), 0);
  EXPECT_EQ(handler.signal(), SIGINT);
}

TEST(InterruptHandlerTest, EachHandlerStartsClear) {
  {
    InterruptHandler first;
    ASSERT_EQ(raise(SIGTERM), 0);
    EXPECT_EQ(first.signal(), SIGTERM);
  }
  InterruptHandler second;
  EXPECT_EQ(second.signal(), 0);
}

TEST(InterruptHandlerDeathTest, SecondSignalExitsAtOnceWithTheShellCode) {
  EXPECT_EXIT(
      {
        InterruptHandler handler;
        raise(SIGINT);
        raise(SIGTERM);
        std::exit(0);  // not reached
      },
      ::testing::ExitedWithCode(143), "SIGTERM received while stopping: exiting at once");
  EXPECT_EXIT(
      {
        InterruptHandler handler;
        raise(SIGTERM);
        raise(SIGINT);
        std::exit(0);
      },
      ::testing::ExitedWithCode(130), "SIGINT received while stopping: exiting at once");
}

TEST(InterruptHandlerTest, RestoresThePreviousHandlers) {
  struct sigaction ignore = {}, before;
  ignore.sa_handler = SIG_IGN;
  ASSERT_EQ(sigaction(SIGTERM, &ignore, &before), 0);
  { InterruptHandler handler; }
  struct sigaction now;
  ASSERT_EQ(sigaction(SIGTERM, &before, &now), 0);
  EXPECT_EQ(now.sa_handler, SIG_IGN);
}

TEST(InterruptTest, StatusCarriesTheSignal) {
  const absl::Status st = InterruptedError(SIGTERM, "stopped");
  EXPECT_EQ(st.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(st.message(), "stopped");
  EXPECT_EQ(InterruptSignal(st), SIGTERM);
  EXPECT_EQ(InterruptSignal(absl::AbortedError("stopped")), std::nullopt);
  EXPECT_EQ(InterruptSignal(absl::OkStatus()), std::nullopt);
  EXPECT_EQ(InterruptExitCode(SIGTERM), 143);
  EXPECT_EQ(InterruptExitCode(SIGINT), 130);
  EXPECT_STREQ(SignalName(SIGTERM), "SIGTERM");
  EXPECT_STREQ(SignalName(SIGINT), "SIGINT");
}

}  // namespace
}  // namespace cctune
