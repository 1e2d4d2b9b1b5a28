#include "checkpoint/state_dict.h"

#include "core/random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cctune {
namespace {

using ::testing::HasSubstr;

TEST(StateDictTest, GetTensorFindsOrNamesTheKey) {
  Generator gen(1);
  StateDict sd;
  sd["norm.scale"] = ValueOrDie(RandomNormal({5}, DType::kF32, gen));
  auto t = GetTensor(sd, "norm.scale");
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->SharesStorageWith(sd["norm.scale"]));
  auto missing = GetTensor(sd, "output.weight", "model 'x'");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("model 'x'"));
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("'output.weight'"));
}

TEST(StateDictTest, CheckKeysListsMissingAndUnexpected) {
  Generator gen(2);
  StateDict sd;
  sd["a"] = ValueOrDie(RandomNormal({2, 3}, DType::kF32, gen));
  sd["b"] = ValueOrDie(RandomNormal({3}, DType::kBF16, gen));
  EXPECT_TRUE(CheckStateDictKeys(sd, {"b", "a"}).ok());
  auto s = CheckStateDictKeys(sd, {"a", "c"}, "ckpt");
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("ckpt"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("missing 'c'"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("unexpected 'b'"));
  EXPECT_EQ(StateDictBytes(sd), 2 * 3 * 4 + 3 * 2);
}

}  // namespace
}  // namespace cctune
