#include "recipes/recipe_main.h"

#include <cstdio>
#include <optional>

#include "absl/strings/match.h"
#include "recipes/builtin_configs.h"
#include "recipes/main_guard.h"
#include "recipes/working_directory.h"
#include "training/interrupt.h"

namespace cctune {

namespace {

// "<prog>: <message>" on stderr; returns 1.
int Fail(const char* prog, absl::string_view message) {
  std::fprintf(stderr, "%s: %s\n", prog, std::string(message).c_str());
  return 1;
}

}  // namespace

int RecipeMain(const RecipeEntry& entry, const std::vector<std::string>& args) {
  const char* const prog = entry.prog;
  std::string config_arg;
  std::vector<std::string> overrides;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-h" || a == "--help") {
      const std::string help = entry.help ? entry.help() : entry.schema().Describe();
      std::fprintf(stdout, "usage: %s --config <path or built-in name> [key=value ...]\n\n%s",
                   prog, help.c_str());
      return 0;
    }
    if (a == "--config") {
      if (i + 1 >= args.size()) {
        std::fprintf(stderr, "%s: --config needs a value\n", prog);
        return 2;
      }
      config_arg = args[++i];
    } else if (absl::StartsWith(a, "--config=")) {
      config_arg = a.substr(9);
    } else {
      overrides.push_back(a);
    }
  }
  if (config_arg.empty()) {
    std::fprintf(stderr, "usage: %s --config <path or built-in name> [key=value ...]\n", prog);
    return 2;
  }
  if (absl::Status registered = entry.register_components(); !registered.ok()) {
    return Fail(prog, registered.ToString());
  }
  absl::StatusOr<Config> config = LoadUnresolvedRecipeConfig(config_arg, overrides);
  if (!config.ok()) return Fail(prog, config.status().message());
  if (const std::vector<ConfigError> errors = entry.validate(*config); !errors.empty()) {
    return Fail(prog, ErrorsToStatus(errors).message());
  }
  if (absl::Status resolved = config->Resolve(); !resolved.ok()) {
    return Fail(prog, resolved.message());
  }
  std::fprintf(stderr, "Running %s with resolved config:\n\n%s\n", prog,
               config->ToYaml().c_str());
  if (absl::Status st = entry.run(*config); !st.ok()) {
    Fail(prog, st.message());
    if (const std::optional<int> sig = InterruptSignal(st)) return InterruptExitCode(*sig);
    return 1;
  }
  return 0;
}

int RecipeBinaryMain(const RecipeEntry& entry, int argc, char** argv) {
  ChdirToUserWorkingDirectory();
  const std::vector<std::string> args(argv + 1, argv + argc);
  return GuardedMain(entry.prog, [&] { return RecipeMain(entry, args); });
}

}  // namespace cctune
