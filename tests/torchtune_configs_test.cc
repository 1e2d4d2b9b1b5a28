// torchtune 0.6.1's own single-device configs, and its distributed llama3_2 1B full and LoRA
// configs on a world of one, (tests/assets/torchtune_0_6_1, unchanged copies)
// run for two steps on small stand-in models: tools/run_torchtune_configs.py writes the
// stand-ins (a random HF checkpoint per family, tokenizers in torchtune's formats, alpaca
// data in a Hugging Face hub cache) and overrides only paths, sizes and the device. Every
// config of llama3_2, llama3_1, llama2, mistral and qwen2_5 must run, the six QLoRA ones with
// their base in NF4 (as lora_<component> with quantize_base=True on NF4-sized stand-ins).
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/llama2c_fixture.h"
#include "tests/subprocess.h"

namespace cctune {
namespace testing {
namespace {

using ::testing::HasSubstr;

TEST(TorchtuneConfigsTest, ShippedConfigsRunOnStandInModels) {
  const std::string binary = RunfilePath("recipes/full_finetune_single_device");
  const std::string bin_dir = binary.substr(0, binary.rfind('/'));
  ProcessResult r = RunProcess(
      {"/usr/bin/env", "python3", RunfilePath("tools/run_torchtune_configs.py"), "--configs",
       RunfilePath("tests/assets/torchtune_0_6_1"), "--bin", bin_dir, "--work",
       TestTempDir("torchtune_configs")});
  ASSERT_NE(r.exit_code, -1) << r.err;
  const std::string& out = r.out;
  for (const char* config :
       {"llama3_2/1B_full_single_device", "llama3_2/3B_full_single_device",
        "llama3_2/1B_lora_single_device", "llama3_2/3B_lora_single_device",
        "llama3_1/8B_full_single_device", "llama3_1/8B_lora_single_device",
        "llama2/7B_lora_single_device", "llama2/7B_full_low_memory",
        "mistral/7B_lora_single_device", "qwen2_5/0.5B_full_single_device",
        "llama3_2/1B_qlora_single_device", "llama3_2/3B_qlora_single_device",
        "llama3_1/8B_qlora_single_device", "llama2/7B_qlora_single_device",
        "llama2/13B_qlora_single_device", "mistral/7B_qlora_single_device",
        "llama3_2/1B_full", "llama3_2/1B_lora"}) {
    EXPECT_THAT(out, HasSubstr(absl::StrCat("RUN  ", config, " "))) << out << r.err;
  }
  EXPECT_THAT(out, HasSubstr("18 of 18 torchtune configs ran 2 steps"));
  EXPECT_EQ(r.exit_code, 0) << out;
}

}  // namespace
}  // namespace testing
}  // namespace cctune
