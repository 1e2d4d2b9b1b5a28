// What the recipe integration tests share: the YAML pieces of their tiny configs, running a
// recipe binary (or `cctune run <recipe>`) on a config written into the test's folder, and
// reading what a fine-tune run wrote (metrics.jsonl, LATEST, safetensors headers).
//
//   RecipeRuns runs(TestTempDir("my_test"));
//   ProcessResult r = runs.Run("full_finetune_single_device", "a",
//                              TinyFullFinetuneYaml(runs.Out("a"), 128, 2));
//   std::vector<LogLine> log = ReadLog(runs.Log("a"));
#ifndef CCTUNE_TESTS_RECIPE_TEST_UTIL_H_
#define CCTUNE_TESTS_RECIPE_TEST_UTIL_H_

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "tests/subprocess.h"

namespace cctune {
namespace testing {

// The `model:` block of the tiny GQA model (vocab 264, 2 layers, 4 heads, 2 KV heads, embed
// 32, intermediate 96, max_seq_len 32) built by `component`, with `extra` (indented key
// lines, e.g. the LoRA keys) after its sizes.
std::string TinyModelYaml(const std::string& component, const std::string& extra = "");
// `tokenizer:`: the byte tokenizer.
std::string ByteTokenizerYaml(int max_seq_len);
// `dataset:`: cctune.data.synthetic_arithmetic.
std::string SyntheticDatasetYaml(int64_t num_samples, int seed);
// `metric_logger:`: a JsonlLogger writing <output_dir>/logs/metrics.jsonl (RecipeRuns::Log).
std::string JsonlLoggerYaml();
// The full fine-tune of the tiny model on synthetic sums: seed 7, batch 8 in 2 micro-batches
// (num_samples / 16 steps per epoch), clipping at 1, AdamW lr 0.01 with 2 warmup steps of the
// cosine schedule, JSONL metrics, fp32 on the CPU.
std::string TinyFullFinetuneYaml(const std::string& output_dir, int64_t num_samples, int epochs);

// The command line of recipes/<recipe> (or of `cctune run <recipe>`) on `config`.
std::vector<std::string> RecipeArgv(const std::string& recipe, const std::string& config,
                                    const std::vector<std::string>& overrides = {},
                                    bool via_cli = false);

// A test's recipe runs, each by name: its config is <dir>/<name>.yaml, its output_dir
// <dir>/<name>.
class RecipeRuns {
 public:
  explicit RecipeRuns(std::string dir) : dir_(std::move(dir)) {}

  const std::string& dir() const { return dir_; }
  std::string Out(const std::string& name) const { return dir_ + "/" + name; }
  std::string Log(const std::string& name) const { return Out(name) + "/logs/metrics.jsonl"; }
  // Writes `yaml` as run `name`'s config and returns the command line of recipes/<recipe> on it.
  std::vector<std::string> Argv(const std::string& recipe, const std::string& name,
                                const std::string& yaml,
                                const std::vector<std::string>& overrides = {}) const;
  ProcessResult Run(const std::string& recipe, const std::string& name, const std::string& yaml,
                    const std::vector<std::string>& overrides = {},
                    const ProcessOptions& options = {}) const;

 private:
  std::string dir_;
};

// A training line of metrics.jsonl.
struct LogLine {
  int64_t step = 0;
  double loss = 0, lr = 0, grad_norm = 0;
  double peak_memory_gb = -1;  // -1: not logged
};
// The training lines of a metrics.jsonl (validation lines have no "loss"); a last line still
// being written is left out.
std::vector<LogLine> ReadLog(const std::string& path);
// `log` has steps 1..`steps` with finite losses whose mean over the last three is at least 0.5
// below the mean over the first three: the run learnt.
void ExpectLossFalls(const std::vector<LogLine>& log, size_t steps);
// Each step of `got` is in `ref` with the same loss, lr and grad_norm, bit for bit.
void ExpectSameSteps(const std::vector<LogLine>& got, const std::vector<LogLine>& ref);
// `got` logs the steps of `ref`, in order, bit for bit (a resumed run against one that was
// never stopped).
void ExpectSameLog(const std::vector<LogLine>& got, const std::vector<LogLine>& ref);

// One run of a test's config with `overrides` (RecipeRuns::Run with the recipe, name and YAML
// fixed).
using RecipeRunFn = std::function<ProcessResult(const std::vector<std::string>& overrides)>;
// An interrupted run: `run` with `overrides` and stop_after_steps=<stop>, which must leave
// LATEST in `output_dir` at step_<stop> and `stop` steps in its JSONL log (JsonlLoggerYaml),
// then with `overrides`, resume_from_checkpoint=true and `resume_overrides`. False (with the
// failure recorded) when either part fails.
bool StopAndResume(const RecipeRunFn& run, const std::string& output_dir, int stop,
                   std::vector<std::string> overrides = {},
                   const std::vector<std::string>& resume_overrides = {});
// Each of `files` is the same, byte for byte, in folders `got` and `want`.
void ExpectSameFiles(const std::string& got, const std::string& want,
                     const std::vector<std::string>& files);

// A named run of a test's config with `overrides`.
using NamedRecipeRunFn = std::function<ProcessResult(
    const std::string& name, const std::vector<std::string>& overrides)>;
// Run `name` with `overrides` to the end: `steps` steps, the last loss 0.5 below the first.
// Then `name`_resumed, stopped after `stop` steps and resumed (StopAndResume): the same log,
// bit for bit, and the same `files` in checkpoint step_<steps>.
void ExpectTrainsAndResumesExactly(const RecipeRuns& runs, const NamedRecipeRunFn& run,
                                   const std::string& name,
                                   const std::vector<std::string>& overrides, size_t steps,
                                   int stop, const std::vector<std::string>& files);

// The step LATEST in `output_dir` names ("step_<N>\n"), -1 when it names none.
int64_t LatestStep(const std::string& output_dir);
// The tensor names in a safetensors file's header (empty when it cannot be read).
std::vector<std::string> SafetensorsNames(const std::string& path);
bool Exists(const std::string& path);
// A tensor's values (any float dtype, any layout) as doubles, through f32.
std::vector<double> ToDoubles(const Tensor& t);

}  // namespace testing
}  // namespace cctune

#endif  // CCTUNE_TESTS_RECIPE_TEST_UTIL_H_
