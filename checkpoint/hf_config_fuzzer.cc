// libFuzzer target for config.json parsing and name mapping: any input must give a Status.
//   bazel --output_base=... build --config=fuzz //checkpoint:hf_config_fuzzer
#include <cstddef>
#include <cstdint>
#include <string>

#include "checkpoint/hf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto config = cctune::ParseHfConfig(text, "fuzz");
  if (config.ok()) {
    auto json = config->ToJson();
    if (!json.ok()) __builtin_trap();  // a validated config must serialise
  }
  // The same bytes as a tensor name, both ways.
  auto a = cctune::HfToTuneName(text);
  auto b = cctune::TuneToHfName(text);
  if (a.ok() && !a->empty() && *cctune::TuneToHfName(*a) != text) __builtin_trap();
  if (b.ok() && *cctune::HfToTuneName(*b) != text) __builtin_trap();
  return 0;
}
