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
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/llama2c_fixture.h"
#include "tests/recipe_test_util.h"

namespace cctune {
namespace testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

// Generous: the machine may be loaded; a healthy run reaches each point in about a second.
constexpr double kTimeoutS = 120;
constexpr char kFull[] = "full_finetune_single_device";

// The tiny LoRA run on synthetic sums, batch 8: num_samples / 8 steps per epoch. (The runs
// that get signalled are long, 40000 or more samples: minutes, so the signal always finds
// them running; they never run to the end.)
std::string LoraConfigYaml(const std::string& out, int num_samples) {
  return absl::StrCat("output_dir: ", out, "\n",
                      TinyModelYaml("cctune.models.tiny.lora_tiny_llama",
                                    "  lora_attn_modules: ['q_proj', 'v_proj']\n"
                                    "  lora_rank: 4\n  lora_alpha: 8\n"),
                      ByteTokenizerYaml(32), SyntheticDatasetYaml(num_samples, 5), R"(seed: 7
batch_size: 8
optimizer:
  _component_: torch.optim.AdamW
  lr: 0.02
)", JsonlLoggerYaml(), "device: cpu\n");
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
  FinetunePreemptionTest() : runs_(TestTempDir("finetune_preemption")) {}

  std::string Out(const std::string& name) const { return runs_.Out(name); }
  std::string Log(const std::string& name) const { return runs_.Log(name); }
  // The full recipe on TinyFullFinetuneYaml, to the end.
  ProcessResult RunFull(const std::string& name, int num_samples, int epochs,
                        const std::vector<std::string>& overrides,
                        const ProcessOptions& options = {}) const {
    return runs_.Run(kFull, name,
                     TinyFullFinetuneYaml(Out(name), num_samples, epochs), overrides, options);
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

  // What SignalAfterSteps saw: the run's result and the step of the checkpoint it stopped
  // with (-1 when it did not stop as it should).
  struct Stopped {
    ProcessResult result;
    int64_t step = -1;
  };
  // Starts `argv` (run `name`), sends `signo` once its log shows `steps` steps and waits: the
  // run must exit with 128 + signo and leave LATEST naming a complete checkpoint.
  Stopped SignalAfterSteps(const std::vector<std::string>& argv, const std::string& name,
                           size_t steps, int signo) const {
    Stopped st;
    std::unique_ptr<Subprocess> p = StartAndWaitForSteps(argv, Log(name), steps);
    if (p == nullptr || !p->Signal(signo)) {
      ADD_FAILURE() << "could not signal run " << name;
      return st;
    }
    st.result = p->Wait();
    EXPECT_EQ(st.result.exit_code, 128 + signo)
        << "signal " << st.result.term_signal << "\n" << st.result.err;
    const int64_t latest = LatestStep(Out(name));
    EXPECT_TRUE(IsComplete(absl::StrCat(Out(name), "/step_", latest))) << st.result.err;
    if (st.result.exit_code == 128 + signo) st.step = latest;
    return st;
  }

  RecipeRuns runs_;
};

// SIGTERM mid-run: the step in flight finishes, a full checkpoint is written and LATEST names
// it, one line says so, the exit code is 143; resuming from it gives the losses and the
// weights of a run that was never stopped. Validation runs every step, so the signal often
// lands in it (or in data loading) rather than in the training step proper.
TEST_F(FinetunePreemptionTest, SigtermSavesACheckpointThatResumesBitIdentically) {
  auto yaml_for = [&](const std::string& name) {
    return absl::StrCat(TinyFullFinetuneYaml(Out(name), 40000, 4), R"(
validation_dataset:
  _component_: cctune.data.synthetic_arithmetic
  num_samples: 16
  seed: 9
eval_every_n_steps: 1
)");
  };
  const std::string name = "sigterm";
  const std::string yaml = yaml_for(name);
  const Stopped st = SignalAfterSteps(runs_.Argv(kFull, name, yaml), name, 3, SIGTERM);
  ASSERT_GE(st.step, 3);
  const ProcessResult& r = st.result;
  const int64_t stopped = st.step;
  const std::string ckpt = absl::StrCat(Out(name), "/step_", stopped);
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
  const ProcessResult resumed =
      runs_.Run(kFull, name, yaml, {"resume_from_checkpoint=true", until});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  const ProcessResult ref = runs_.Run(kFull, "sigterm_ref", yaml_for("sigterm_ref"), {until});
  ASSERT_EQ(ref.exit_code, 0) << ref.err;
  const std::vector<LogLine> got = ReadLog(Log(name));
  ASSERT_EQ(got.size(), static_cast<size_t>(stopped + 3));
  ExpectSameLog(got, ReadLog(Log("sigterm_ref")));
  const std::string last = absl::StrCat("/step_", stopped + 3);
  ExpectSameFiles(Out(name) + last, Out("sigterm_ref") + last,
                  {"model.safetensors", "recipe_state.safetensors"});
}

// The LoRA recipe gets the same through the shared loop; a Ctrl-C exits with 130.
TEST_F(FinetunePreemptionTest, SigintStopsTheLoraRecipeWithACheckpoint) {
  const std::string name = "lora_sigint";
  const std::vector<std::string> argv =
      runs_.Argv("lora_finetune_single_device", name, LoraConfigYaml(Out(name), 80000));
  const Stopped st = SignalAfterSteps(argv, name, 2, SIGINT);
  ASSERT_GE(st.step, 2);
  const ProcessResult& r = st.result;
  const int64_t stopped = st.step;
  const std::string ckpt = absl::StrCat(Out(name), "/step_", stopped);
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
      runs_.Argv(kFull, name, TinyFullFinetuneYaml(Out(name), 40000, 4), {"save_every_n_steps=1"});
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
}  // namespace testing
}  // namespace cctune
