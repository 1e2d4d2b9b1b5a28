#include "recipes/main_guard.h"

#include <new>
#include <stdexcept>
#include <vector>

#include "gtest/gtest.h"

namespace cctune {
namespace {

TEST(MainGuardTest, ExceptionsBecomeExitCodeOne) {
  EXPECT_EQ(GuardedMain("t", [] { return 0; }), 0);
  EXPECT_EQ(GuardedMain("t", [] { return 2; }), 2);
  EXPECT_EQ(GuardedMain("t", []() -> int { throw std::bad_alloc(); }), 1);
  EXPECT_EQ(GuardedMain("t",
                        [] {
                          std::vector<int> v;
                          v.reserve(v.max_size() + 1);  // std::length_error
                          return 0;
                        }),
            1);
  EXPECT_EQ(GuardedMain("t", []() -> int { throw 42; }), 1);
}

}  // namespace
}  // namespace cctune
