// bazel run //recipes:lora_finetune_single_device -- --config <name or path> [key=value ...]
#include <string>
#include <vector>

#include "recipes/lora_finetune_single_device.h"
#include "recipes/working_directory.h"

int main(int argc, char** argv) {
  cctune::ChdirToUserWorkingDirectory();
  return cctune::LoRAFinetuneMain(std::vector<std::string>(argv + 1, argv + argc));
}
