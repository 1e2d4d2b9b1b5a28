// libFuzzer target for ${} interpolation. The first byte picks the input's role:
//   even: the rest is a whole YAML config, resolved as loaded;
//   odd:  the rest, split at newlines, gives the string values of keys k0, k1, ... in a fixed
//         config with nested maps and lists, so that most inputs reach the resolver.
// Resolution must end with a tree or errors, within the depth limits; a resolved tree must
// hold no unresolved ${} except those written escaped, and must print as YAML.
//   bazel --output_base=$HOME/.cache/cctune/fuzz build --config=fuzz //config:interpolation_fuzzer
//   D=config/fuzz/interpolation
//   bazel-bin/config/interpolation_fuzzer -max_total_time=120 -dict=$D.dict CORPUS ${D}_corpus
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "config/interpolation.h"
#include "config/yaml_loader.h"

namespace {

constexpr char kBase[] = R"(base: /data
n: 3
f: 1.5
flag: true
none: null
list: [a, 1, [b, c], {d: e}]
map: {x: 1, y: {z: deep}, l: [1, 2]}
)";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const absl::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  cctune::ConfigNode root;
  if (data[0] % 2 == 0) {
    auto loaded = cctune::LoadYamlString(text, "fuzz.yaml");
    if (!loaded.ok()) return 0;
    root = *std::move(loaded);
  } else {
    auto loaded = cctune::LoadYamlString(kBase, "base.yaml");
    if (!loaded.ok()) __builtin_trap();
    root = *std::move(loaded);
    std::vector<std::string> lines;
    for (absl::string_view line : absl::StrSplit(text, '\n')) {
      lines.emplace_back(line);
      if (lines.size() >= 64) break;
    }
    // Odd keys inside a nested map (for relative references), then even ones at the top level
    // (a Set() on the root may move the nested map).
    cctune::ConfigNode* map = root.FindMutable("map");
    for (size_t i = 1; i < lines.size(); i += 2) {
      map->Set("k" + std::to_string(i), cctune::ConfigNode::String(lines[i]));
    }
    for (size_t i = 0; i < lines.size(); i += 2) {
      root.Set("k" + std::to_string(i), cctune::ConfigNode::String(lines[i]));
    }
  }
  std::vector<std::string> failed;
  std::vector<cctune::ConfigError> errors = cctune::ResolveInterpolations(&root, &failed);
  for (const cctune::ConfigError& e : errors) (void)e.ToString();
  (void)cctune::ErrorsToStatus(errors);
  if (errors.empty() && !failed.empty()) __builtin_trap();  // a failure without an error
  (void)root.ToYaml();
  return 0;
}
