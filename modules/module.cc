#include "modules/module.h"

#include "core/status.h"

namespace cctune {

namespace {
std::string Join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}
}  // namespace

Parameter& Module::RegisterParameter(std::string name, Shape shape, ParameterInit init,
                                     std::optional<DType> dtype) {
  for (const auto& [existing, p] : parameters_) {
    CCTUNE_CHECK(existing != name, "parameter '", name, "' registered twice");
  }
  auto p = std::make_unique<Parameter>();
  p->shape = std::move(shape);
  p->dtype = dtype;
  p->init = init;
  Parameter& ref = *p;
  parameters_.emplace_back(std::move(name), std::move(p));
  return ref;
}

void Module::RegisterModule(std::string name, Module* child) {
  if (child == nullptr) return;
  CCTUNE_CHECK(child != this, "module '", name, "' registered as its own child");
  for (const auto& [existing, c] : children_) {
    CCTUNE_CHECK(existing != name, "child module '", name, "' registered twice");
  }
  children_.emplace_back(std::move(name), child);
}

void Module::ForEachParameter(const ParameterFn& fn, const std::string& prefix) {
  for (auto& [name, p] : parameters_) fn(Join(prefix, name), *p);
  for (auto& [name, child] : children_) child->ForEachParameter(fn, Join(prefix, name));
}

void Module::ForEachParameter(const ConstParameterFn& fn, const std::string& prefix) const {
  for (const auto& [name, p] : parameters_) fn(Join(prefix, name), *p);
  for (const auto& [name, child] : children_) {
    static_cast<const Module*>(child)->ForEachParameter(fn, Join(prefix, name));
  }
}

std::vector<std::pair<std::string, const Parameter*>> Module::NamedParameters() const {
  std::vector<std::pair<std::string, const Parameter*>> out;
  ForEachParameter(ConstParameterFn(
      [&](const std::string& name, const Parameter& p) { out.emplace_back(name, &p); }));
  return out;
}

int64_t Module::NumParameters() const {
  int64_t n = 0;
  ForEachParameter(
      ConstParameterFn([&](const std::string&, const Parameter& p) { n += NumElements(p.shape); }));
  return n;
}

bool Module::IsMaterialized() const {
  bool all = true;
  ForEachParameter(ConstParameterFn(
      [&](const std::string&, const Parameter& p) { all = all && p.value.defined(); }));
  return all;
}

}  // namespace cctune
