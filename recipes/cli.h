// The cctune command line, after torchtune's `tune`:
//   cctune ls                                    recipes and their built-in configs
//   cctune cp <config> <dest> [--make-parents]   copy a built-in config to edit it
//   cctune validate <config> [key=value ...]     check a config, reporting every problem
//   cctune run <recipe> --config <name|path> [key=value ...]
#ifndef CCTUNE_RECIPES_CLI_H_
#define CCTUNE_RECIPES_CLI_H_

#include <functional>
#include <string>
#include <vector>

#include "config/config.h"
#include "config/node.h"

namespace cctune {

struct RecipeInfo {
  std::string name;
  std::vector<std::string> configs;  // built-in config names
  std::function<int(const std::vector<std::string>&)> main;
  std::function<std::vector<ConfigError>(const Config&)> validate;
};

// The recipes cctune knows, by name.
const std::vector<RecipeInfo>& Recipes();

// Runs a cctune command (args exclude the program name); returns the exit code.
int CctuneMain(const std::vector<std::string>& args);

}  // namespace cctune

#endif  // CCTUNE_RECIPES_CLI_H_
