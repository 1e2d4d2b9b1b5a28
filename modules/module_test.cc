#include "modules/module.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cctune {
namespace {

using ::testing::ElementsAre;
using ::testing::Pair;

class Leaf : public Module {
 public:
  explicit Leaf(int64_t n, bool with_bias) {
    RegisterParameter("weight", {n, n + 1});
    if (with_bias) RegisterParameter("bias", {n}, ParameterInit::Zeros(), DType::kF32);
  }
};

class Parent : public Module {
 public:
  Parent() : a_(new Leaf(2, true)), b_(new Leaf(3, false)) {
    RegisterParameter("scale", {5}, ParameterInit::Ones());
    RegisterModule("a", a_.get());
    RegisterModule("missing", nullptr);  // optional child: skipped
    RegisterModule("b", b_.get());
  }

 private:
  std::unique_ptr<Leaf> a_;
  std::unique_ptr<Leaf> b_;
};

std::vector<std::pair<std::string, Shape>> Names(const Module& m, const std::string& prefix = "") {
  std::vector<std::pair<std::string, Shape>> out;
  m.ForEachParameter(Module::ConstParameterFn([&](const std::string& n, const Parameter& p) {
                       out.emplace_back(n, p.shape);
                     }),
                     prefix);
  return out;
}

TEST(ModuleTest, NamesJoinWithDotsInDeclarationOrder) {
  Parent p;
  EXPECT_THAT(Names(p), ElementsAre(Pair("scale", Shape{5}), Pair("a.weight", Shape{2, 3}),
                                    Pair("a.bias", Shape{2}), Pair("b.weight", Shape{3, 4})));
  EXPECT_THAT(
      Names(p, "layers.7"),
      ElementsAre(Pair("layers.7.scale", Shape{5}), Pair("layers.7.a.weight", Shape{2, 3}),
                  Pair("layers.7.a.bias", Shape{2}), Pair("layers.7.b.weight", Shape{3, 4})));
}

TEST(ModuleTest, CountsDeclaredElementsWithoutMemory) {
  Parent p;
  EXPECT_EQ(p.NumParameters(), 5 + 6 + 2 + 12);
  EXPECT_FALSE(p.IsMaterialized());
  const auto named = p.NamedParameters();
  ASSERT_EQ(named.size(), 4u);
  EXPECT_EQ(named[2].first, "a.bias");
  EXPECT_EQ(named[2].second->dtype, DType::kF32);
  EXPECT_EQ(named[2].second->init.kind, ParameterInit::Kind::kZeros);
  EXPECT_FALSE(named[0].second->dtype.has_value());
  EXPECT_EQ(named[0].second->init.kind, ParameterInit::Kind::kOnes);
}

TEST(ModuleTest, MaterializedOnceEveryValueIsBound) {
  Parent p;
  p.ForEachParameter(Module::ParameterFn([](const std::string& name, Parameter& param) {
    if (name != "b.weight") param.value = ValueOrDie(Tensor::Zeros(param.shape, DType::kF32));
  }));
  EXPECT_FALSE(p.IsMaterialized());
  p.ForEachParameter(Module::ParameterFn([](const std::string&, Parameter& param) {
    param.value = ValueOrDie(Tensor::Empty(param.shape, DType::kF32, Device::Meta()));
  }));
  EXPECT_TRUE(p.IsMaterialized());
}

class Duplicate : public Module {
 public:
  Duplicate() {
    RegisterParameter("w", {1});
    RegisterParameter("w", {2});
  }
};

TEST(ModuleDeathTest, DuplicateParameterNameIsABug) {
  EXPECT_DEATH({ Duplicate d; }, "registered twice");
}

}  // namespace
}  // namespace cctune
