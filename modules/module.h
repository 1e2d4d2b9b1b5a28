// Module: the base of every layer. A module declares its parameters (name, shape, optional
// dtype, how to initialise them) and its child modules while it is constructed; nothing is
// allocated then. A ParameterArena (modules/parameters.h) later walks the tree, lays every
// parameter out in one contiguous buffer per dtype and binds named views back into the
// modules. Names join with '.', exactly as torchtune's state dict spells them
// (layers.0.attn.q_proj.weight).
#ifndef CCTUNE_MODULES_MODULE_H_
#define CCTUNE_MODULES_MODULE_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"

namespace cctune {

// How ParameterArena::InitializeRandom fills a parameter (tests, benchmarks, training from
// scratch). kUniform is PyTorch's nn.Linear default: U(-bound, bound).
struct ParameterInit {
  enum class Kind { kNormal, kUniform, kOnes, kZeros };
  Kind kind = Kind::kNormal;
  double scale = 1.0;  // std for kNormal, bound for kUniform

  static ParameterInit Normal(double std) { return {Kind::kNormal, std}; }
  static ParameterInit Uniform(double bound) { return {Kind::kUniform, bound}; }
  static ParameterInit Ones() { return {Kind::kOnes, 0.0}; }
  static ParameterInit Zeros() { return {Kind::kZeros, 0.0}; }
};

// One declared parameter. `value` is undefined until an arena binds a view into it.
struct Parameter {
  Shape shape;
  std::optional<DType> dtype;  // unset: the arena's default dtype
  ParameterInit init;
  Tensor value;
};

class Module {
 public:
  using ParameterFn = std::function<void(const std::string& name, Parameter& p)>;
  using ConstParameterFn = std::function<void(const std::string& name, const Parameter& p)>;

  Module() = default;
  virtual ~Module() = default;
  // Parameters and children are referred to by address: modules never copy or move.
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Visits every parameter of this module and its children, depth first in declaration
  // order, with its full dotted name (`prefix` + local path).
  void ForEachParameter(const ParameterFn& fn, const std::string& prefix = "");
  void ForEachParameter(const ConstParameterFn& fn, const std::string& prefix = "") const;

  // (name, parameter) pairs, in ForEachParameter order.
  std::vector<std::pair<std::string, const Parameter*>> NamedParameters() const;
  // Number of parameter elements declared (materialised or not).
  int64_t NumParameters() const;
  // Whether every parameter has been bound to memory (or to a meta tensor).
  bool IsMaterialized() const;

 protected:
  // Declares a parameter; the returned reference stays valid for the module's lifetime.
  Parameter& RegisterParameter(std::string name, Shape shape,
                               ParameterInit init = ParameterInit::Normal(0.02),
                               std::optional<DType> dtype = std::nullopt);
  // Declares a child whose parameters are named "<name>.<child param>". The child is owned
  // elsewhere (normally by the subclass, through a unique_ptr) and must outlive this module.
  // A null child is allowed and skipped (optional sub-modules).
  void RegisterModule(std::string name, Module* child);

 private:
  std::vector<std::pair<std::string, std::unique_ptr<Parameter>>> parameters_;
  std::vector<std::pair<std::string, Module*>> children_;
};

}  // namespace cctune

#endif  // CCTUNE_MODULES_MODULE_H_
