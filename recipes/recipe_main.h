// The one `main` of every recipe binary (generate, full_finetune_single_device,
// lora_finetune_single_device) and of `cctune run <recipe>`:
//   <recipe> --config <path or built-in name> [key=value ...]   run it
//   <recipe> --help                                              its keys
// It registers the recipe's components, loads the config with the overrides, validates it
// (every problem at once), resolves and prints it, then runs the recipe. Exit codes: 0; 1 for
// any error (config, files, the run itself); 2 for a usage error (no --config, --config
// without a value); 128 + signo when a signal stopped the run (training/interrupt.h: 143 for
// SIGTERM, 130 for SIGINT).
#ifndef CCTUNE_RECIPES_RECIPE_MAIN_H_
#define CCTUNE_RECIPES_RECIPE_MAIN_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "config/config.h"
#include "config/schema.h"

namespace cctune {

// What a recipe gives the shared main.
struct RecipeEntry {
  const char* prog;  // the binary's name, the prefix of every message
  std::function<const Schema&()> schema;
  std::function<absl::Status()> register_components;
  std::function<std::vector<ConfigError>(const Config&)> validate;
  std::function<absl::Status(const Config&)> run;
  // The --help text after the usage line; empty: the schema's Describe().
  std::function<std::string()> help;
};

// Parses `args` (the command line after the program name) and runs `entry`; returns the exit
// code.
int RecipeMain(const RecipeEntry& entry, const std::vector<std::string>& args);

// A recipe binary's main(): back to the user's working directory (under `bazel run`), then
// RecipeMain on argv[1..], with an escaping exception turned into exit code 1
// (recipes/main_guard.h).
int RecipeBinaryMain(const RecipeEntry& entry, int argc, char** argv);

}  // namespace cctune

#endif  // CCTUNE_RECIPES_RECIPE_MAIN_H_
