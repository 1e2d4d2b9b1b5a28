// libFuzzer target for the YAML loader: any byte string must give a Status or a tree that
// prints (ToYaml) to YAML loading back to an equal tree. Also parses the bytes as an override
// value. Hostile inputs (self-referential aliases, billion laughs, deep nesting) must fail
// within the limits of config/node.h, never by exhausting the stack or memory.
//   bazel --output_base=$HOME/.cache/cctune/fuzz build --config=fuzz //config:yaml_fuzzer
//   D=config/fuzz/yaml
//   bazel-bin/config/yaml_fuzzer -max_total_time=120 -dict=$D.dict CORPUS ${D}_corpus
#include <cstddef>
#include <cstdint>
#include <string>

#include "config/yaml_loader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  auto root = cctune::LoadYamlString(text, "fuzz.yaml");
  if (root.ok()) {
    const std::string yaml = root->ToYaml();
    auto again = cctune::LoadYamlString(yaml, "again.yaml");
    if (!again.ok() || *again != *root) __builtin_trap();
    (void)root->Describe();
  }
  auto value = cctune::ParseYamlValue(text, cctune::Location{"fuzz override", 0, 0});
  if (value.ok()) (void)value->ToYaml();
  return 0;
}
