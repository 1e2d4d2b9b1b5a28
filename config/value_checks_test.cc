// The shared value checks: NonNegative accepts zero and positives, passes other kinds to the
// schema's type check, and refuses negatives (naming the value) and NaN.
#include "config/value_checks.h"

#include <cmath>
#include <string>

#include "config/node.h"
#include "gtest/gtest.h"

namespace cctune {
namespace {

TEST(NonNegativeTest, RefusesNegativesAndNaNNamingTheValue) {
  EXPECT_TRUE(NonNegative(ConfigNode::Float(0.0)).ok());
  EXPECT_TRUE(NonNegative(ConfigNode::Int(3)).ok());
  EXPECT_TRUE(NonNegative(ConfigNode::String("-1")).ok());  // the schema checks the type
  const absl::Status neg = NonNegative(ConfigNode::Float(-0.5));
  EXPECT_FALSE(neg.ok());
  EXPECT_NE(neg.message().find("must be >= 0, got -0.5"), std::string::npos) << neg;
  EXPECT_FALSE(NonNegative(ConfigNode::Float(std::nan(""))).ok());
}

}  // namespace
}  // namespace cctune
