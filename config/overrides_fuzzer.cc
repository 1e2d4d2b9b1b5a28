// libFuzzer target for command-line overrides (key=value, ~key, component=name): the input,
// split at newlines, is the argument list applied to a fixed config, which is then resolved.
// Every argument must give a Status; the tree after any mix of good and bad overrides must
// keep its paths right (each node's path finds the node again) and print as YAML.
//   bazel --output_base=$HOME/.cache/cctune/fuzz build --config=fuzz //config:overrides_fuzzer
//   D=config/fuzz/overrides
//   bazel-bin/config/overrides_fuzzer -max_total_time=120 -dict=$D.dict CORPUS ${D}_corpus
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "config/config.h"

namespace {

constexpr char kBase[] = R"(output_dir: /tmp/out
model:
  _component_: cctune.models.llama2c.stories
  num_layers: 6
tokenizer:
  _component_: cctune.models.llama2c.tokenizer
  path: ${output_dir}/tok.bin
  max_seq_len: 512
files: [a.bin, b.bin, {c: [1, 2]}]
empty: null
)";

// Every node's path leads back to it.
void CheckPaths(const cctune::ConfigNode& root, const cctune::ConfigNode& node) {
  if (!node.path().empty() && root.Find(node.path()) != &node) __builtin_trap();
  if (node.IsList()) {
    for (const cctune::ConfigNode& item : node.items()) CheckPaths(root, item);
  } else if (node.IsMap()) {
    for (const auto& e : node.entries()) CheckPaths(root, e.second);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> args;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    args.emplace_back(line);
    if (args.size() >= 64) break;
  }
  auto config = cctune::Config::FromString(kBase, "base.yaml");
  if (!config.ok()) __builtin_trap();
  (void)config->ApplyOverrides(args);
  CheckPaths(config->unresolved(), config->unresolved());
  if (config->Resolve().ok()) CheckPaths(config->root(), config->root());
  (void)config->ToYaml();
  return 0;
}
