// bazel run //recipes:lora_finetune_single_device -- --config <name or path> [key=value ...]
#include <string>
#include <vector>

#include "recipes/lora_finetune_single_device.h"
#include "recipes/main_guard.h"
#include "recipes/working_directory.h"

int main(int argc, char** argv) {
  cctune::ChdirToUserWorkingDirectory();
  const std::vector<std::string> args(argv + 1, argv + argc);
  return cctune::GuardedMain("lora_finetune_single_device", [&] { return cctune::LoRAFinetuneMain(args); });
}
