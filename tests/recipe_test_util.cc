#include "tests/recipe_test_util.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "core/status.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace cctune {
namespace testing {

std::string TinyModelYaml(const std::string& component, const std::string& extra) {
  return absl::StrCat("model:\n  _component_: ", component, R"(
  vocab_size: 264
  num_layers: 2
  num_heads: 4
  num_kv_heads: 2
  embed_dim: 32
  intermediate_dim: 96
  max_seq_len: 32
)", extra);
}

std::string ByteTokenizerYaml(int max_seq_len) {
  return absl::StrCat("tokenizer:\n  _component_: cctune.data.byte_tokenizer\n  max_seq_len: ",
                      max_seq_len, "\n");
}

std::string SyntheticDatasetYaml(int64_t num_samples, int seed) {
  return absl::StrCat("dataset:\n  _component_: cctune.data.synthetic_arithmetic\n",
                      "  num_samples: ", num_samples, "\n  seed: ", seed, "\n");
}

std::string JsonlLoggerYaml() {
  return "metric_logger:\n  _component_: torchtune.training.metric_logging.JsonlLogger\n"
         "  log_dir: ${output_dir}/logs\n";
}

std::string TinyFullFinetuneYaml(const std::string& output_dir, int64_t num_samples,
                                 int epochs) {
  return absl::StrCat("output_dir: ", output_dir, "\n",
                      TinyModelYaml("cctune.models.tiny.tiny_llama"), ByteTokenizerYaml(32),
                      SyntheticDatasetYaml(num_samples, 5), R"(seed: 7
shuffle: true
batch_size: 8
epochs: )", epochs, R"(
gradient_accumulation_steps: 2
clip_grad_norm: 1.0
optimizer:
  _component_: torch.optim.AdamW
  lr: 0.01
lr_scheduler:
  _component_: torchtune.training.lr_schedulers.get_cosine_schedule_with_warmup
  num_warmup_steps: 2
loss:
  _component_: torchtune.modules.loss.CEWithChunkedOutputLoss
)", JsonlLoggerYaml(), R"(log_every_n_steps: 1
dtype: fp32
device: cpu
)");
}

std::vector<std::string> RecipeArgv(const std::string& recipe, const std::string& config,
                                    const std::vector<std::string>& overrides, bool via_cli) {
  std::vector<std::string> argv;
  if (via_cli) {
    argv = {RunfilePath("recipes/cctune"), "run", recipe};
  } else {
    argv = {RunfilePath("recipes/" + recipe)};
  }
  argv.push_back("--config");
  argv.push_back(config);
  argv.insert(argv.end(), overrides.begin(), overrides.end());
  return argv;
}

std::vector<std::string> RecipeRuns::Argv(const std::string& recipe, const std::string& name,
                                          const std::string& yaml,
                                          const std::vector<std::string>& overrides) const {
  const std::string config = dir_ + "/" + name + ".yaml";
  std::ofstream(config) << yaml;
  return RecipeArgv(recipe, config, overrides);
}

ProcessResult RecipeRuns::Run(const std::string& recipe, const std::string& name,
                              const std::string& yaml, const std::vector<std::string>& overrides,
                              const ProcessOptions& options) const {
  return RunProcess(Argv(recipe, name, yaml, overrides), options);
}

std::vector<LogLine> ReadLog(const std::string& path) {
  std::vector<LogLine> lines;
  const std::string text = ReadFile(path);
  std::istringstream in(text.substr(0, text.rfind('\n') + 1));
  std::string line;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line);
    if (!j.contains("loss")) continue;
    LogLine l;
    l.step = j["step"].get<int64_t>();
    l.loss = j["loss"].get<double>();
    l.lr = j["lr"].get<double>();
    l.grad_norm = j["grad_norm"].get<double>();
    if (j.contains("peak_memory_gb")) l.peak_memory_gb = j["peak_memory_gb"].get<double>();
    lines.push_back(l);
  }
  return lines;
}

void ExpectLossFalls(const std::vector<LogLine>& log, size_t steps) {
  ASSERT_EQ(log.size(), steps);
  ASSERT_GE(steps, 3u);
  for (size_t i = 0; i < log.size(); ++i) {
    EXPECT_EQ(log[i].step, static_cast<int64_t>(i) + 1);
    EXPECT_TRUE(std::isfinite(log[i].loss)) << "step " << log[i].step;
  }
  const double first = (log[0].loss + log[1].loss + log[2].loss) / 3;
  const double last = (log[steps - 3].loss + log[steps - 2].loss + log[steps - 1].loss) / 3;
  EXPECT_LT(last, first - 0.5) << "first " << first << " last " << last;
}

void ExpectSameSteps(const std::vector<LogLine>& got, const std::vector<LogLine>& ref) {
  std::map<int64_t, LogLine> by_step;
  for (const LogLine& l : ref) by_step[l.step] = l;
  for (const LogLine& l : got) {
    ASSERT_EQ(by_step.count(l.step), 1u) << "step " << l.step << " is not in the reference";
    const LogLine& r = by_step.at(l.step);
    EXPECT_EQ(l.loss, r.loss) << "step " << l.step;
    EXPECT_EQ(l.lr, r.lr) << "step " << l.step;
    EXPECT_EQ(l.grad_norm, r.grad_norm) << "step " << l.step;
  }
}

void ExpectSameLog(const std::vector<LogLine>& got, const std::vector<LogLine>& ref) {
  ASSERT_EQ(got.size(), ref.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].step, ref[i].step) << "line " << i;
  }
  ExpectSameSteps(got, ref);
}

bool StopAndResume(const RecipeRunFn& run, const std::string& output_dir, int stop,
                   std::vector<std::string> overrides,
                   const std::vector<std::string>& resume_overrides) {
  std::vector<std::string> first = overrides;
  first.push_back(absl::StrCat("stop_after_steps=", stop));
  const ProcessResult stopped = run(first);
  EXPECT_EQ(stopped.exit_code, 0) << stopped.err;
  if (stopped.exit_code != 0) return false;
  EXPECT_EQ(LatestStep(output_dir), stop);
  EXPECT_EQ(ReadLog(output_dir + "/logs/metrics.jsonl").size(), static_cast<size_t>(stop));
  overrides.push_back("resume_from_checkpoint=true");
  overrides.insert(overrides.end(), resume_overrides.begin(), resume_overrides.end());
  const ProcessResult resumed = run(overrides);
  EXPECT_EQ(resumed.exit_code, 0) << resumed.err;
  return resumed.exit_code == 0;
}

void ExpectSameFiles(const std::string& got, const std::string& want,
                     const std::vector<std::string>& files) {
  for (const std::string& file : files) {
    const std::string bytes = ReadFile(got + "/" + file);
    EXPECT_FALSE(bytes.empty()) << got << "/" << file;
    EXPECT_TRUE(bytes == ReadFile(want + "/" + file))
        << got << "/" << file << " differs from " << want << "/" << file;
  }
}

void ExpectTrainsAndResumesExactly(const RecipeRuns& runs, const NamedRecipeRunFn& run,
                                   const std::string& name,
                                   const std::vector<std::string>& overrides, size_t steps,
                                   int stop, const std::vector<std::string>& files) {
  const ProcessResult ref = run(name, overrides);
  ASSERT_EQ(ref.exit_code, 0) << ref.err;
  const std::vector<LogLine> a = ReadLog(runs.Log(name));
  ASSERT_EQ(a.size(), steps);
  EXPECT_LT(a.back().loss, a.front().loss - 0.5);
  const std::string resumed = name + "_resumed";
  ASSERT_TRUE(StopAndResume([&](const auto& o) { return run(resumed, o); }, runs.Out(resumed),
                            stop, overrides));
  ExpectSameLog(ReadLog(runs.Log(resumed)), a);
  const std::string last = absl::StrCat("/step_", steps);
  ExpectSameFiles(runs.Out(resumed) + last, runs.Out(name) + last, files);
}

int64_t LatestStep(const std::string& output_dir) {
  const std::string content = ReadFile(output_dir + "/LATEST");  // the view points into it
  absl::string_view latest = absl::StripSuffix(content, "\n");
  int64_t step = -1;
  if (!absl::ConsumePrefix(&latest, "step_") || !absl::SimpleAtoi(latest, &step)) return -1;
  return step;
}

std::vector<std::string> SafetensorsNames(const std::string& path) {
  const std::string bytes = ReadFile(path);
  std::vector<std::string> names;
  if (bytes.size() < 8) return names;
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);  // little-endian hosts only, as the project
  if (bytes.size() < 8 + n) return names;
  nlohmann::json header = nlohmann::json::parse(bytes.substr(8, n));
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() != "__metadata__") names.push_back(it.key());
  }
  return names;
}

bool Exists(const std::string& path) { return std::ifstream(path).good(); }

std::vector<double> ToDoubles(const Tensor& t) {
  absl::StatusOr<Tensor> f = t.To(DType::kF32);
  CCTUNE_CHECK_OK(f.status());
  absl::StatusOr<Tensor> c = f->Contiguous();
  CCTUNE_CHECK_OK(c.status());
  const float* p = c->data<float>();
  return std::vector<double>(p, p + c->numel());
}

}  // namespace testing
}  // namespace cctune
