#include "recipes/cli.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "checkpoint/checkpointer_components.h"
#include "config/catalog.h"
#include "config/validate.h"
#include "core/status.h"
#include "recipes/finetune_utils.h"
#include "recipes/builtin_configs.h"
#include "recipes/full_finetune_distributed.h"
#include "recipes/full_finetune_single_device.h"
#include "recipes/generate_recipe.h"
#include "recipes/launcher.h"
#include "recipes/quantize_recipe.h"
#include "recipes/lora_finetune_distributed.h"
#include "recipes/lora_finetune_single_device.h"
#include "recipes/recipe_main.h"

namespace cctune {

namespace {

namespace fs = std::filesystem;

constexpr char kUsage[] =
    "usage: cctune [-h] {ls,cp,validate,run} ...\n"
    "\n"
    "Welcome to the cctune CLI!\n"
    "\n"
    "commands:\n"
    "  ls          List all built-in recipes and configs (--components: every component\n"
    "              and its keys)\n"
    "  cp          Copy a built-in config to a local path\n"
    "  validate    Validate a config and ensure that it is well-formed\n"
    "  run         Run a recipe: cctune run [--nproc_per_node N] <recipe> --config <name|path>\n"
    "              [key=value ...]\n";

const RecipeInfo* FindRecipe(absl::string_view name) {
  for (const RecipeInfo& r : Recipes()) {
    if (r.name == name) return &r;
  }
  return nullptr;
}

// The recipe a built-in config belongs to, or nullptr.
const RecipeInfo* RecipeOfConfig(absl::string_view config) {
  const EmbeddedConfig* builtin = FindBuiltinConfig(config);
  if (builtin == nullptr) return nullptr;
  for (const RecipeInfo& r : Recipes()) {
    for (const std::string& c : r.configs) {
      if (c == builtin->name) return &r;
    }
  }
  return nullptr;
}

// The recipe a torchtune config's header names ("# tune run [--nproc_per_node 2]
// lora_finetune_single_device --config ..."), without ".py" or a folder; "" when no comment
// line has one.
std::string RecipeNameFromHeader(const std::string& path) {
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    absl::string_view l = absl::StripLeadingAsciiWhitespace(line);
    if (!absl::ConsumePrefix(&l, "#")) continue;
    const size_t at = l.find("tune run ");
    if (at == absl::string_view::npos) continue;
    std::vector<std::string> words =
        absl::StrSplit(l.substr(at + 9), absl::ByAnyChar(" \t"), absl::SkipEmpty());
    for (size_t i = 0; i < words.size(); ++i) {
      const std::string& w = words[i];
      if (absl::StartsWith(w, "-")) {
        // An option ("--nproc_per_node 8" or "--nnodes=1"); its value is skipped below.
        if (w.find('=') == std::string::npos && i + 1 < words.size() &&
            !absl::StartsWith(words[i + 1], "-") &&
            words[i + 1].find_first_not_of("0123456789") == std::string::npos) {
          ++i;
        }
        continue;
      }
      std::string name = fs::path(w).filename().string();
      if (absl::EndsWith(name, ".py")) name.resize(name.size() - 3);
      return name;
    }
  }
  return "";
}

// What validate checks of a config whose recipe it does not know: every top-level component
// against its registered schema, the ${} references, the checkpoint and dataset files.
std::vector<ConfigError> ValidateWithoutRecipe(const Config& config) {
  for (const RecipeInfo& r : Recipes()) CCTUNE_CHECK_OK(r.register_components());
  Config resolved = config;
  std::vector<ConfigError> errors;
  if (!resolved.resolved()) errors = resolved.ResolveCollectingErrors();
  const ConfigNode& root = resolved.root();
  for (const ConfigNode::Entry& e : root.entries()) {
    if (e.second.IsComponent()) CheckComponent(e.second, "", ComponentCatalog::Global(), &errors);
  }
  if (const ConfigNode* ck = root.Find("checkpointer"); ck != nullptr && ck->IsMap()) {
    CheckCheckpointFilesExist(*ck, &errors);
  }
  for (const char* key : {"dataset", "validation_dataset", "dataset_val"}) {
    for (ConfigError& e : MissingDatasetFiles(root, key)) errors.push_back(e);
  }
  return errors;
}

constexpr char kLsUsage[] =
    "usage: cctune ls [--components [--kind <kind>]]\n\n"
    "Lists the recipes and their built-in configs; with --components, every registered\n"
    "`_component_` name of every kind (or only <kind>: model, tokenizer, checkpointer,\n"
    "dataset, optimizer, lr_scheduler, loss, metric_logger) with its keys: name, type,\n"
    "default, whether it is required, and what it does.\n";

int LsComponents(const std::string& kind) {
  for (const RecipeInfo& r : Recipes()) {
    const absl::Status status = r.register_components();
    if (!status.ok()) {
      std::fprintf(stderr, "cctune ls: registering the components of %s: %s\n", r.name.c_str(),
                   std::string(status.message()).c_str());
      return 1;
    }
  }
  absl::StatusOr<std::string> listing = DescribeComponents(ComponentCatalog::Global(), kind);
  if (!listing.ok()) {
    std::fprintf(stderr, "cctune ls: %s\n", std::string(listing.status().message()).c_str());
    return 1;
  }
  std::printf("%s", listing->c_str());
  return 0;
}

int Ls(const std::vector<std::string>& args) {
  bool components = false;
  std::string kind;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "-h" || args[i] == "--help") {
      std::printf("%s", kLsUsage);
      return 0;
    }
    if (args[i] == "--components") {
      components = true;
    } else if (args[i] == "--kind" && i + 1 < args.size()) {
      kind = args[++i];
    } else {
      std::fprintf(stderr, "cctune ls: unexpected argument '%s'\n%s", args[i].c_str(), kLsUsage);
      return 2;
    }
  }
  if (!kind.empty() && !components) {
    std::fprintf(stderr, "cctune ls: --kind needs --components\n%s", kLsUsage);
    return 2;
  }
  if (components) return LsComponents(kind);
  std::printf("%-40s %s\n", "RECIPE", "CONFIG");
  for (const RecipeInfo& r : Recipes()) {
    for (size_t i = 0; i < r.configs.size(); ++i) {
      std::printf("%-40s %s\n", i == 0 ? r.name.c_str() : "", r.configs[i].c_str());
    }
    if (r.configs.empty()) std::printf("%-40s\n", r.name.c_str());
  }
  return 0;
}

int Cp(const std::vector<std::string>& args) {
  std::vector<std::string> positional;
  bool make_parents = false;
  for (const std::string& a : args) {
    if (a == "--make-parents") {
      make_parents = true;
    } else if (a == "-h" || a == "--help") {
      std::printf(
          "usage: cctune cp <config> <destination> [--make-parents]\n\n"
          "Copies a built-in config (see `cctune ls`) to a local path to edit and run it.\n");
      return 0;
    } else {
      positional.push_back(a);
    }
  }
  if (positional.size() != 2) {
    std::fprintf(stderr, "usage: cctune cp <config> <destination> [--make-parents]\n");
    return 2;
  }
  const std::string& name = positional[0];
  const EmbeddedConfig* config = FindBuiltinConfig(name);
  if (config == nullptr) {
    if (FindRecipe(name) != nullptr) {
      std::fprintf(stderr,
                   "cctune cp: '%s' is a recipe; recipes are compiled into cctune and cannot "
                   "be copied. Copy one of its configs instead (see `cctune ls`).\n",
                   name.c_str());
    } else {
      std::fprintf(stderr,
                   "cctune cp: Invalid file name: %s. Try `cctune ls` to see all available "
                   "files to copy.\n",
                   name.c_str());
    }
    return 1;
  }
  fs::path dest(positional[1]);
  std::error_code ec;
  if (fs::is_directory(dest, ec)) {
    dest /= fs::path(config->name).filename().string() + ".yaml";
  } else if (!dest.has_extension()) {
    dest += ".yaml";
  }
  if (dest.has_parent_path() && !fs::exists(dest.parent_path(), ec)) {
    if (!make_parents) {
      std::fprintf(stderr,
                   "cctune cp: Cannot create regular file: '%s'. No such file or directory. "
                   "If the specified destination's parent directory does not exist and you "
                   "would like to create it on-the-fly, use the --make-parents flag.\n",
                   dest.string().c_str());
      return 1;
    }
    fs::create_directories(dest.parent_path(), ec);
    if (ec) {
      std::fprintf(stderr, "cctune cp: cannot create %s: %s\n", dest.parent_path().string().c_str(),
                   ec.message().c_str());
      return 1;
    }
  }
  std::ofstream out(dest, std::ios::binary | std::ios::trunc);
  out << config->yaml;
  out.flush();  // a full disk shows here; close() alone does not always report it
  const bool written = static_cast<bool>(out);
  out.close();
  if (!written || !out) {
    std::fprintf(stderr, "cctune cp: cannot write %s\n", dest.string().c_str());
    return 1;
  }
  std::printf("Copied file to %s\n", dest.string().c_str());
  return 0;
}

int Validate(const std::vector<std::string>& args) {
  std::string config_arg, recipe_name;
  std::vector<std::string> overrides;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-h" || a == "--help") {
      std::printf(
          "usage: cctune validate <config> [--recipe <name>] [key=value ...]\n\n"
          "Checks the config against its recipe's keys and every component's keys, the ${} "
          "references and the checkpoint files, and reports every problem at once.\n");
      return 0;
    }
    if (a == "--recipe" && i + 1 < args.size()) {
      recipe_name = args[++i];
    } else if (a == "--config" && i + 1 < args.size() && config_arg.empty()) {
      config_arg = args[++i];
    } else if (config_arg.empty() && !absl::StrContains(a, "=") && !absl::StartsWith(a, "~")) {
      config_arg = a;
    } else {
      overrides.push_back(a);
    }
  }
  if (config_arg.empty()) {
    std::fprintf(stderr, "usage: cctune validate <config> [--recipe <name>] [key=value ...]\n");
    return 2;
  }
  // The recipe: --recipe, the one a built-in config belongs to, the one a torchtune config's
  // header names, else generate.
  const RecipeInfo* recipe = nullptr;
  if (recipe_name.empty()) {
    recipe = RecipeOfConfig(config_arg);
    if (recipe == nullptr) recipe_name = RecipeNameFromHeader(config_arg);
    if (recipe == nullptr && recipe_name.empty()) recipe = FindRecipe("generate");
  }
  if (recipe == nullptr) recipe = FindRecipe(recipe_name);
  absl::StatusOr<Config> config = LoadUnresolvedRecipeConfig(config_arg, overrides);
  if (!config.ok()) {
    std::fprintf(stderr, "%s\n", std::string(config.status().message()).c_str());
    return 1;
  }
  std::vector<ConfigError> errors =
      recipe != nullptr ? recipe->validate(*config) : ValidateWithoutRecipe(*config);
  if (recipe == nullptr) {
    std::string known;
    for (const RecipeInfo& r : Recipes()) absl::StrAppend(&known, known.empty() ? "" : ", ", r.name);
    ConfigError e;
    e.location.source = config_arg;
    e.message = absl::StrCat("unknown recipe '", recipe_name, "' (cctune has ", known,
                             "; pass --recipe <name>)");
    errors.push_back(std::move(e));
  }
  if (!errors.empty()) {
    std::fprintf(stderr, "%s\n", std::string(ErrorsToStatus(errors).message()).c_str());
    return 1;
  }
  std::printf("Config is well-formed!\n");
  return 0;
}

constexpr char kRunUsage[] =
    "usage: cctune run [--nproc_per_node N [--nnodes M --hostfile F]] <recipe> "
    "--config <name|path> [key=value ...]\n\n"
    "--nproc_per_node N starts N ranks of the recipe with mpirun (per node; docs/distributed.md)"
    "\n\nrecipes:";

int Run(std::vector<std::string> args) {
  absl::StatusOr<LaunchOptions> launch = ParseLaunchFlags(&args);
  if (!launch.ok()) {
    std::fprintf(stderr, "%s\n", std::string(launch.status().message()).c_str());
    return 2;
  }
  if (NeedsLauncher(*launch) && !args.empty() && args[0] != "-h" && args[0] != "--help") {
    if (FindRecipe(args[0]) == nullptr) {
      std::fprintf(stderr, "cctune run: unknown recipe '%s'. Try `cctune ls`.\n", args[0].c_str());
      return 1;
    }
    absl::Status failure;
    absl::StatusOr<LaunchHost> host = CurrentHost();
    if (!host.ok()) {
      failure = host.status();
    } else {
      absl::StatusOr<std::vector<std::string>> argv = MpirunCommand(*launch, *host, args);
      failure = argv.ok() ? Exec(*argv) : argv.status();  // Exec returns only on failure
    }
    std::fprintf(stderr, "%s\n", std::string(failure.message()).c_str());
    return 1;
  }
  if (args.empty() || args[0] == "-h" || args[0] == "--help") {
    std::printf("%s", kRunUsage);
    for (const RecipeInfo& r : Recipes()) std::printf(" %s", r.name.c_str());
    std::printf("\n");
    return args.empty() ? 2 : 0;
  }
  const RecipeInfo* recipe = FindRecipe(args[0]);
  if (recipe == nullptr) {
    std::fprintf(stderr, "cctune run: unknown recipe '%s'. Try `cctune ls`.\n", args[0].c_str());
    return 1;
  }
  return recipe->main(std::vector<std::string>(args.begin() + 1, args.end()));
}

}  // namespace

const std::vector<RecipeInfo>& Recipes() {
  // `cctune run <recipe>` is the recipe binary's main (recipes/recipe_main.h).
  const auto info = [](const RecipeEntry& entry, std::vector<std::string> configs) {
    return RecipeInfo{entry.prog, std::move(configs),
                      [&entry](const std::vector<std::string>& args) {
                        return RecipeMain(entry, args);
                      },
                      entry.validate, entry.register_components};
  };
  static const auto* const recipes = new std::vector<RecipeInfo>{
      info(GenerateRecipe(),
           {"llama2/7B_generation", "llama3_1/8B_generation", "llama3_2/1B_generation",
            "llama2c/generation", "demo/generation"}),
      info(FullFinetuneRecipe(),
           {"demo/full_finetune", "llama3_1/8B_full_single_device",
            "llama3_2/1B_full_single_device"}),
      info(LoRAFinetuneRecipe(),
           {"demo/lora_finetune", "llama3_1/8B_lora_single_device",
            "llama3_2/1B_lora_single_device"}),
      info(FullFinetuneDistributedRecipe(),
           {"demo/full_finetune_distributed", "llama3_1/8B_full", "llama3_2/1B_full"}),
      info(LoRAFinetuneDistributedRecipe(),
           {"demo/lora_finetune_distributed", "llama3_1/8B_lora", "llama3_2/1B_lora"}),
      info(QuantizeRecipe(), {"llama2c/quantization"}),
  };
  return *recipes;
}

int CctuneMain(const std::vector<std::string>& args) {
  if (args.empty()) {
    std::fprintf(stderr, "%s", kUsage);
    return 2;
  }
  const std::string& verb = args[0];
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (verb == "-h" || verb == "--help") {
    std::printf("%s", kUsage);
    return 0;
  }
  if (verb == "ls") return Ls(rest);
  if (verb == "cp") return Cp(rest);
  if (verb == "validate") return Validate(rest);
  if (verb == "run") return Run(rest);
  std::fprintf(stderr, "cctune: invalid choice: '%s' (choose from ls, cp, validate, run)\n%s",
               verb.c_str(), kUsage);
  return 2;
}

}  // namespace cctune
