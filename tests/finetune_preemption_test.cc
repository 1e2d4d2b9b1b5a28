// Both fine-tune recipes, through their binaries, under the things that end runs early:
// a SIGTERM or SIGINT (a scheduler's preemption, a Ctrl-C) sent to the running process stops
// it after the step in flight with a checkpoint it resumes from bit-identically, and exits
// with 128 + signo; a second signal exits at once. A save that fails with a real write error
// (EFBIG past RLIMIT_FSIZE, as a full disk gives ENOSPC) keeps the last good checkpoint, and
// the leftovers of killed saves are removed before a run goes on. A LATEST that points
// anywhere but a complete checkpoint of output_dir is refused.
#include <signal.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/llama2c_fixture.h"
#include "tests/subprocess.h"

namespace cctune {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::ProcessOptions;
using testing::ProcessResult;
using testing::ReadFile;
using testing::RunfilePath;
using testing::RunProcess;
using testing::Subprocess;

// Generous: the machine may be loaded; a healthy run reaches each point in about a second.
constexpr double kTimeoutS = 120;

// The tiny GQA model on synthetic sums, batch 8 with 2 micro-batches: num_samples / 16 steps
// per epoch. The runs that get signalled are long (40000 samples, 4 epochs: minutes), so the
// signal always finds them running; they never run to the end.
std::string FullConfigYaml(const std::string& out, int num_samples, int epochs) {
  return absl::StrCat("output_dir: ", out, R"(
model:
  _component_: cctune.models.tiny.tiny_llama
  vocab_size: 264
  num_layers: 2
  num_heads: 4
  num_kv_heads: 2
  embed_dim: 32
  intermediate_dim: 96
  max_seq_len: 32
tokenizer:
  _component_: cctune.data.byte_tokenizer
  max_seq_len: 32
dataset:
  _component_: cctune.data.synthetic_arithmetic
  num_samples: )", num_samples, R"(
  seed: 5
seed: 7
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
metric_logger:
  _component_: torchtune.training.metric_logging.JsonlLogger
  log_dir: ${output_dir}/logs
dtype: fp32
device: cpu
)");
}

std::string LoraConfigYaml(const std::string& out, int num_samples) {
  return absl::StrCat("output_dir: ", out, R"(
model:
  _component_: cctune.models.tiny.lora_tiny_llama
  vocab_size: 264
  num_layers: 2
  num_heads: 4
  num_kv_heads: 2
  embed_dim: 32
  intermediate_dim: 96
  max_seq_len: 32
  lora_attn_modules: ['q_proj', 'v_proj']
  lora_rank: 4
  lora_alpha: 8
tokenizer:
  _component_: cctune.data.byte_tokenizer
  max_seq_len: 32
dataset:
  _component_: cctune.data.synthetic_arithmetic
  num_samples: )", num_samples, R"(
  seed: 5
seed: 7
batch_size: 8
optimizer:
  _component_: torch.optim.AdamW
  lr: 0.02
metric_logger:
  _component_: torchtune.training.metric_logging.JsonlLogger
  log_dir: ${output_dir}/logs
device: cpu
)");
}

struct LogLine {
  int64_t step;
  double loss, lr, grad_norm;
};

// The training lines of a metrics.jsonl (validation lines have no "loss"); a last line still
// being written is left out.
std::vector<LogLine> ReadLog(const std::string& path) {
  std::vector<LogLine> lines;
  const std::string text = ReadFile(path);
  std::istringstream in(text.substr(0, text.rfind('\n') + 1));
  std::string line;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line);
    if (!j.contains("loss")) continue;
    lines.push_back({j["step"].get<int64_t>(), j["loss"].get<double>(), j["lr"].get<double>(),
                     j["grad_norm"].get<double>()});
  }
  return lines;
}

// Each step's values equal the reference's for that step, bit for bit.
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

// The step LATEST names ("step_<N>\n"), -1 when it does not.
int64_t LatestStep(const std::string& out) {
  const std::string content = ReadFile(out + "/LATEST");  // the view below points into it
  absl::string_view latest = absl::StripSuffix(content, "\n");
  int64_t step = -1;
  if (!absl::ConsumePrefix(&latest, "step_") || !absl::SimpleAtoi(latest, &step)) return -1;
  return step;
}

bool IsComplete(const std::string& dir) {
  return fs::is_regular_file(dir + "/config.json") &&
         fs::is_regular_file(dir + "/model.safetensors") &&
         fs::is_regular_file(dir + "/recipe_state.safetensors");
}

// Files and folders a save that did not finish leaves: atomic-write temporaries and step_*
// folders without the recipe state.
std::vector<std::string> Leftovers(const std::string& out) {
  std::vector<std::string> found;
  for (const auto& e : fs::recursive_directory_iterator(out)) {
    const std::string name = e.path().filename().string();
    if (name.find(".tmp.") != std::string::npos) found.push_back(e.path().string());
    if (e.is_directory() && name.rfind("step_", 0) == 0 && !IsComplete(e.path().string())) {
      found.push_back(e.path().string());
    }
  }
  return found;
}

class FinetunePreemptionTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::TestTempDir("finetune_preemption"); }

  std::string Out(const std::string& name) const { return absl::StrCat(dir_, "/", name); }
  std::string Log(const std::string& name) const { return Out(name) + "/logs/metrics.jsonl"; }

  std::vector<std::string> Argv(const std::string& recipe, const std::string& name,
                                const std::string& yaml,
                                const std::vector<std::string>& overrides) const {
    const std::string config = absl::StrCat(dir_, "/", name, ".yaml");
    std::ofstream(config) << yaml;
    std::vector<std::string> argv = {RunfilePath("recipes/" + recipe), "--config", config};
    argv.insert(argv.end(), overrides.begin(), overrides.end());
    return argv;
  }
  // The full recipe on FullConfigYaml, to the end.
  ProcessResult RunFull(const std::string& name, int num_samples, int epochs,
                        const std::vector<std::string>& overrides,
                        const ProcessOptions& options = {}) const {
    return RunProcess(Argv("full_finetune_single_device", name,
                           FullConfigYaml(Out(name), num_samples, epochs), overrides),
                      options);
  }
  // Starts a run and returns once its log shows `steps` training steps (null, with a failure
  // recorded, when it ended or timed out first).
  std::unique_ptr<Subprocess> StartAndWaitForSteps(const std::vector<std::string>& argv,
                                                   const std::string& log, size_t steps) const {
    std::unique_ptr<Subprocess> p = Subprocess::Start(argv);
    if (p == nullptr) {
      ADD_FAILURE() << "fork: " << std::strerror(errno);
      return nullptr;
    }
    if (!p->WaitFor([&] { return ReadLog(log).size() >= steps; }, kTimeoutS)) {
      ADD_FAILURE() << "the run did not reach step " << steps << ":\n" << p->Err();
      return nullptr;
    }
    return p;
  }

  std::string dir_;
};

// SIGTERM mid-run: the step in flight finishes, a full checkpoint is written and LATEST names
// it, one line says so, the exit code is 143; resuming from it gives the losses and the
// weights of a run that was never stopped. Validation runs every step, so the signal often
// lands in it (or in data loading) rather than in the training step proper.
TEST_F(FinetunePreemptionTest, SigtermSavesACheckpointThatResumesBitIdentically) {
  auto yaml_for = [&](const std::string& name) {
    return absl::StrCat(FullConfigYaml(Out(name), 40000, 4), R"(
validation_dataset:
  _component_: cctune.data.synthetic_arithmetic
  num_samples: 16
  seed: 9
eval_every_n_steps: 1
)");
  };
  const std::string name = "sigterm";
  const std::string yaml = yaml_for(name);
  std::unique_ptr<Subprocess> p =
      StartAndWaitForSteps(Argv("full_finetune_single_device", name, yaml, {}), Log(name), 3);
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(p->Signal(SIGTERM));
  const ProcessResult r = p->Wait();
  EXPECT_EQ(r.exit_code, 143) << "signal " << r.term_signal << "\n" << r.err;
  const int64_t stopped = LatestStep(Out(name));
  ASSERT_GE(stopped, 3) << r.err;
  const std::string ckpt = absl::StrCat(Out(name), "/step_", stopped);
  EXPECT_TRUE(IsComplete(ckpt));
  const std::string line =
      absl::StrCat("full_finetune_single_device: SIGTERM: stopped after step ", stopped,
                   " with checkpoint ", ckpt, " (LATEST); rerun with resume_from_checkpoint=true");
  EXPECT_THAT(r.err, HasSubstr(line));
  EXPECT_THAT(r.err, HasSubstr("SIGTERM received: stopping after this step"));
  EXPECT_EQ(ReadLog(Log(name)).size(), static_cast<size_t>(stopped));  // no step after it
  EXPECT_TRUE(Leftovers(Out(name)).empty());

  // Resumed to a few steps on, against an uninterrupted run to the same step (stop_after_steps
  // leaves the schedule as it is).
  const std::string until = absl::StrCat("stop_after_steps=", stopped + 3);
  const ProcessResult resumed = RunProcess(Argv("full_finetune_single_device", name, yaml,
                                                {"resume_from_checkpoint=true", until}));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  const ProcessResult ref = RunProcess(
      Argv("full_finetune_single_device", "sigterm_ref", yaml_for("sigterm_ref"), {until}));
  ASSERT_EQ(ref.exit_code, 0) << ref.err;
  const std::vector<LogLine> got = ReadLog(Log(name)), want = ReadLog(Log("sigterm_ref"));
  ASSERT_EQ(got.size(), static_cast<size_t>(stopped + 3));
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i].step, static_cast<int64_t>(i) + 1);
  ExpectSameSteps(got, want);
  const std::string last = absl::StrCat("/step_", stopped + 3);
  EXPECT_EQ(ReadFile(Out(name) + last + "/model.safetensors"),
            ReadFile(Out("sigterm_ref") + last + "/model.safetensors"));
  EXPECT_EQ(ReadFile(Out(name) + last + "/recipe_state.safetensors"),
            ReadFile(Out("sigterm_ref") + last + "/recipe_state.safetensors"));
}

// The LoRA recipe gets the same through the shared loop; a Ctrl-C exits with 130.
TEST_F(FinetunePreemptionTest, SigintStopsTheLoraRecipeWithACheckpoint) {
  const std::string name = "lora_sigint";
  const std::vector<std::string> argv =
      Argv("lora_finetune_single_device", name, LoraConfigYaml(Out(name), 80000), {});
  std::unique_ptr<Subprocess> p = StartAndWaitForSteps(argv, Log(name), 2);
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(p->Signal(SIGINT));
  const ProcessResult r = p->Wait();
  EXPECT_EQ(r.exit_code, 130) << "signal " << r.term_signal << "\n" << r.err;
  const int64_t stopped = LatestStep(Out(name));
  ASSERT_GE(stopped, 2) << r.err;
  const std::string ckpt = absl::StrCat(Out(name), "/step_", stopped);
  EXPECT_TRUE(IsComplete(ckpt));
  EXPECT_TRUE(fs::is_regular_file(ckpt + "/adapter_model.safetensors"));
  EXPECT_THAT(r.err, HasSubstr(absl::StrCat("lora_finetune_single_device: SIGINT: stopped after "
                                            "step ", stopped, " with checkpoint ", ckpt)));
  std::vector<std::string> resume = argv;
  resume.push_back("resume_from_checkpoint=true");
  resume.push_back(absl::StrCat("stop_after_steps=", stopped + 1));
  const ProcessResult resumed = RunProcess(resume);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_THAT(resumed.err, HasSubstr(absl::StrCat("Resumed from ", ckpt, " at step ", stopped)));
  EXPECT_EQ(LatestStep(Out(name)), stopped + 1);
}

// A second signal while the first is being handled exits at once, saying so. The child is
// stopped while both signals are sent, so they arrive together whatever the machine's load:
// the first handled becomes the request, the second the exit (Linux usually handles SIGINT
// first, but a process-directed signal may reach another thread, so either order passes).
// The run saves every step, so the exit may cut a save short; the next run cleans up after
// it and resumes from LATEST.
TEST_F(FinetunePreemptionTest, SecondSignalExitsAtOnce) {
  const std::string name = "second_signal";
  const std::vector<std::string> argv =
      Argv("full_finetune_single_device", name, FullConfigYaml(Out(name), 40000, 4),
           {"save_every_n_steps=1"});
  std::unique_ptr<Subprocess> p = StartAndWaitForSteps(argv, Log(name), 2);
  ASSERT_NE(p, nullptr);
  ASSERT_TRUE(p->Signal(SIGSTOP));
  ASSERT_TRUE(p->WaitUntilStopped());
  ASSERT_TRUE(p->Signal(SIGINT));
  ASSERT_TRUE(p->Signal(SIGTERM));
  ASSERT_TRUE(p->Signal(SIGCONT));
  const ProcessResult r = p->Wait();
  ASSERT_TRUE(r.exit_code == 130 || r.exit_code == 143)
      << "exit " << r.exit_code << " signal " << r.term_signal << "\n" << r.err;
  const bool term_second = r.exit_code == 143;
  const std::string second = term_second ? "SIGTERM" : "SIGINT";
  // (The first handler's own message is not checked: on another thread it may lose the race
  // with the second's _exit.)
  EXPECT_THAT(r.err, HasSubstr(absl::StrCat(second, " received while stopping: exiting at once "
                                            "without a checkpoint (exit code ",
                                            r.exit_code, ")")));
  EXPECT_THAT(r.err, Not(HasSubstr(": stopped after step")));  // no orderly stop

  const int64_t latest = LatestStep(Out(name));
  ASSERT_GE(latest, 1) << r.err;
  EXPECT_TRUE(IsComplete(absl::StrCat(Out(name), "/step_", latest)));
  std::vector<std::string> resume = argv;
  resume.push_back("resume_from_checkpoint=true");
  resume.push_back(absl::StrCat("stop_after_steps=", latest + 1));
  const ProcessResult resumed = RunProcess(resume);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_EQ(LatestStep(Out(name)), latest + 1);
  EXPECT_THAT(Leftovers(Out(name)), ::testing::IsEmpty());
}

// A save that fails with a real write error (EFBIG: model.safetensors is ~170 KB, the limit
// 64 KiB) ends the run with an error naming the file and the errno text and the last good
// checkpoint; nothing of the failed save remains, LATEST still names the good one, and a
// later run goes on from it to the weights of a run that never failed.
TEST_F(FinetunePreemptionTest, FailedSaveKeepsTheLastGoodCheckpoint) {
  const ProcessResult ref = RunFull("efbig_ref", 128, 2, {});
  ASSERT_EQ(ref.exit_code, 0) << ref.err;
  const std::string out = Out("efbig");
  ASSERT_EQ(RunFull("efbig", 128, 2, {"stop_after_steps=3"}).exit_code, 0);
  const std::string good_weights = ReadFile(out + "/step_3/model.safetensors");
  ASSERT_FALSE(good_weights.empty());

  ProcessOptions limited;
  limited.file_size_limit = 64 << 10;
  const ProcessResult failed =
      RunFull("efbig", 128, 2, {"resume_from_checkpoint=true"}, limited);
  EXPECT_EQ(failed.exit_code, 1) << failed.err;
  // Resumed at step 3; the epoch ends (and saves) at step 8.
  EXPECT_THAT(failed.err, HasSubstr("saving checkpoint " + out + "/step_8 at step 8 failed"));
  EXPECT_THAT(failed.err, HasSubstr(out + "/step_8/model.safetensors"));
  EXPECT_THAT(failed.err, HasSubstr(std::strerror(EFBIG)));
  EXPECT_THAT(failed.err, HasSubstr("the last good checkpoint is " + out + "/step_3"));
  EXPECT_EQ(ReadFile(out + "/LATEST"), "step_3\n");
  EXPECT_FALSE(fs::exists(out + "/step_8"));
  EXPECT_THAT(Leftovers(out), ::testing::IsEmpty());
  EXPECT_EQ(ReadFile(out + "/step_3/model.safetensors"), good_weights);

  const ProcessResult rerun = RunFull("efbig", 128, 2, {"resume_from_checkpoint=true"});
  ASSERT_EQ(rerun.exit_code, 0) << rerun.err;
  EXPECT_THAT(rerun.err, HasSubstr("Resumed from " + out + "/step_3 at step 3"));
  const std::vector<LogLine> got = ReadLog(Log("efbig")), want = ReadLog(Log("efbig_ref"));
  ASSERT_EQ(want.size(), 16u);
  EXPECT_EQ(got.back().step, 16);
  ExpectSameSteps(got, want);  // including the failed run's steps 4..8
  EXPECT_EQ(ReadFile(out + "/step_16/model.safetensors"),
            ReadFile(Out("efbig_ref") + "/step_16/model.safetensors"));
}

// What a save killed mid-way (SIGKILL, a second signal, a crash) leaves: a step folder with a
// partial temporary, a LATEST temporary, a temporary inside the good checkpoint. The next run
// removes them (saying so) before it trains, and goes on as if they had never been there.
TEST_F(FinetunePreemptionTest, LeftoversOfAKilledSaveAreRemovedAtTheStart) {
  const ProcessResult ref = RunFull("leftovers_ref", 128, 2, {});
  ASSERT_EQ(ref.exit_code, 0) << ref.err;
  const std::string out = Out("leftovers");
  ASSERT_EQ(RunFull("leftovers", 128, 2, {"stop_after_steps=3"}).exit_code, 0);
  fs::create_directories(out + "/step_8");
  std::ofstream(out + "/step_8/.model.safetensors.tmp.99999.0") << std::string(50000, 'x');
  std::ofstream(out + "/.LATEST.tmp.99999.1") << "step_8\n";
  std::ofstream(out + "/step_3/.recipe_state.safetensors.tmp.99999.2") << "partial";
  const ProcessResult r = RunFull("leftovers", 128, 2, {"resume_from_checkpoint=true"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const std::string& p : {out + "/step_8", out + "/.LATEST.tmp.99999.1",
                               out + "/step_3/.recipe_state.safetensors.tmp.99999.2"}) {
    EXPECT_THAT(r.err, HasSubstr("Removed " + p + " (left by a save that did not finish)"));
  }
  EXPECT_THAT(Leftovers(out), ::testing::IsEmpty());
  EXPECT_EQ(ReadFile(out + "/LATEST"), "step_16\n");
  ExpectSameSteps(ReadLog(Log("leftovers")), ReadLog(Log("leftovers_ref")));
  EXPECT_EQ(ReadFile(out + "/step_16/model.safetensors"),
            ReadFile(Out("leftovers_ref") + "/step_16/model.safetensors"));
}

// A LATEST that names another run's checkpoint (through '..', an absolute path or a symlink)
// or a half-written folder would resume from the wrong weights; the recipe refuses it,
// naming the file and its content.
TEST_F(FinetunePreemptionTest, BadLatestIsRefused) {
  ASSERT_EQ(RunFull("latest_other", 128, 1, {"stop_after_steps=2"}).exit_code, 0);
  const std::string out = Out("latest_bad");
  fs::create_directories(out + "/step_5");  // a killed save
  std::ofstream(out + "/step_5/config.json") << "{}";
  fs::create_symlink(Out("latest_other") + "/step_2", out + "/step_2");
  struct Case {
    std::string content, why;
  };
  for (const Case& c : std::vector<Case>{
           {"../latest_other/step_2\n", "a path, not a folder name"},
           {Out("latest_other") + "/step_2\n", "an absolute path"},
           {"step_2\n", "a symlink that leads out of output_dir"},
           {"step_5\n", "an incomplete checkpoint"},
           {"..\n", "not a checkpoint folder"},
           {"step_9\n", "no such folder"}}) {
    std::ofstream(out + "/LATEST") << c.content;
    const ProcessResult r = RunFull("latest_bad", 128, 1, {"resume_from_checkpoint=true"});
    EXPECT_EQ(r.exit_code, 1) << c.content << r.err;
    EXPECT_THAT(r.err, HasSubstr(absl::StrCat(out, "/LATEST contains '",
                                              absl::StripSuffix(c.content, "\n"), "': ", c.why)));
    EXPECT_THAT(r.err, Not(HasSubstr("Resumed from")));
  }
}

}  // namespace
}  // namespace cctune
