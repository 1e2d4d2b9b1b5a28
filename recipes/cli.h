// The cctune command line, after torchtune's `tune`:
//   cctune ls                                    recipes and their built-in configs
//   cctune ls --components [--kind <kind>]       every registered component (model,
//                                                tokenizer, checkpointer, dataset, optimizer,
//                                                lr_scheduler, loss, metric_logger) and its keys
//   cctune cp <config> <dest> [--make-parents]   copy a built-in config to edit it
//   cctune validate <config> [key=value ...]     check a config, reporting every problem
//   cctune run <recipe> --config <name|path> [key=value ...]
//   cctune run --nproc_per_node N [--nnodes M --hostfile F] <recipe> ...   N ranks under mpirun
//                                                (recipes/launcher.h)
#ifndef CCTUNE_RECIPES_CLI_H_
#define CCTUNE_RECIPES_CLI_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "config/config.h"
#include "config/node.h"

namespace cctune {

struct RecipeInfo {
  std::string name;
  std::vector<std::string> configs;  // built-in config names
  std::function<int(const std::vector<std::string>&)> main;
  std::function<std::vector<ConfigError>(const Config&)> validate;
  // Registers every component the recipe instantiates (for `cctune ls --components`).
  std::function<absl::Status()> register_components;
};

// The recipes cctune knows, by name.
const std::vector<RecipeInfo>& Recipes();

// Runs a cctune command (args exclude the program name); returns the exit code.
int CctuneMain(const std::vector<std::string>& args);

}  // namespace cctune

#endif  // CCTUNE_RECIPES_CLI_H_
