// RunTrainingLoop in-process on a tiny random decoder, with a logger and a save callback that
// raise SIGTERM at chosen points of a step (its loss log, its validation, its save), so each
// place a signal can land is covered deterministically: the loop always stops at the end of
// that step with exactly one checkpoint of it. A failed save removes its folder and names the
// last good checkpoint; the leftovers of killed saves are removed before the first step.
#include "recipes/finetune_loop.h"

#include <signal.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/random.h"
#include "core/status.h"
#include "data/data_loader.h"
#include "data/dataset.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "models/tiny/tiny.h"
#include "modules/parameters.h"
#include "training/decoder_trainer.h"
#include "training/interrupt.h"
#include "training/metric_logger.h"
#include "training/optim.h"
#include "training/train_step.h"

namespace cctune {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Records what is logged; `on_log` runs inside LogDict (there a test raises its signal).
class RecordingLogger final : public MetricLogger {
 public:
  absl::Status LogDict(const Metrics& metrics, int64_t step) override {
    for (const auto& [name, value] : metrics) names.push_back(absl::StrCat(name, "@", step));
    if (on_log) on_log(metrics, step);
    return absl::OkStatus();
  }
  absl::Status Close() override {
    closed = true;
    return absl::OkStatus();
  }
  bool Logged(const std::string& name, int64_t step) const {
    return std::find(names.begin(), names.end(), absl::StrCat(name, "@", step)) != names.end();
  }

  std::vector<std::string> names;
  std::function<void(const Metrics&, int64_t)> on_log;
  bool closed = false;
};

// 64 random sequences of 8 tokens, batch 4: 16 steps.
std::shared_ptr<const Dataset> RandomDataset(uint64_t seed) {
  Generator gen(seed);
  std::vector<Sample> samples(64);
  for (Sample& s : samples) {
    for (int i = 0; i < 8; ++i) s.tokens.push_back(static_cast<int32_t>(gen.UniformInt(32)));
    s.labels = s.tokens;
  }
  return std::make_shared<const Dataset>(std::move(samples), false, "random");
}

class FinetuneLoopTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    out_ = absl::StrCat(tmp ? tmp : "/tmp", "/finetune_loop_test/",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(out_);
    fs::create_directories(out_);
    model_ = ValueOrDie(TinyLlama(32, 2, 4, 2, 16, 32, 8));
    params_ = ValueOrDie(ParameterArena::Create(*model_, DType::kF32, Device::Cpu()));
    Generator gen(3);
    CCTUNE_CHECK_OK(params_.InitializeRandom(gen));
    grads_ = ValueOrDie(
        ParameterArena::Allocate(params_.layout().WithDType(DType::kF32), Device::Cpu()));
    trainer_ = ValueOrDie(DecoderTrainer::Create(model_.get(), &grads_, {}));
    SgdOptions so;
    so.lr = 0.1;
    optimizer_ = ValueOrDie(Sgd::Create(ValueOrDie(ArenaParamBuffers(params_, grads_)), so));
    DataLoaderOptions lo;
    lo.batch_size = 4;
    loader_.emplace(ValueOrDie(DataLoader::Create(RandomDataset(1), lo)));
    lo.shuffle = false;
    val_loader_.emplace(ValueOrDie(DataLoader::Create(RandomDataset(2), lo)));

    loop_.trainer = trainer_.get();
    loop_.optimizer = optimizer_.get();
    loop_.base_lr = 0.1;
    loop_.loader = &*loader_;
    loop_.logger = &logger_;
    loop_.device = Device::Cpu();
    loop_.steps_per_epoch = loader_->batches_per_epoch();
    loop_.output_dir = out_;
    // Writes what a complete checkpoint holds (the recipes write real weights here).
    loop_.save = [this](int64_t) -> absl::StatusOr<std::string> {
      saved_.push_back(progress_.step);
      if (on_save) CCTUNE_RETURN_IF_ERROR(on_save(progress_.step));
      const std::string name = CheckpointName(progress_.step);
      fs::create_directories(out_ + "/" + name);
      std::ofstream(out_ + "/" + name + "/config.json") << "{}";
      std::ofstream(out_ + "/" + name + "/" + kRecipeStateFile) << "state";
      std::ofstream(out_ + "/" + kLatestFile) << name << "\n";
      return out_ + "/" + name;
    };
  }

  std::string out_;
  std::unique_ptr<TransformerDecoder> model_;
  ParameterArena params_, grads_;
  std::unique_ptr<DecoderTrainer> trainer_;
  std::unique_ptr<Optimizer> optimizer_;
  std::optional<DataLoader> loader_, val_loader_;
  RecordingLogger logger_;
  TrainingLoop loop_;
  RunProgress progress_;
  std::vector<int64_t> saved_;
  std::function<absl::Status(int64_t step)> on_save;
};

void ExpectStoppedBySigterm(const absl::Status& st, int64_t step, const std::string& out) {
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(InterruptSignal(st), SIGTERM) << st;
  EXPECT_THAT(st.message(), HasSubstr(absl::StrCat("SIGTERM: stopped after step ", step,
                                                   " with checkpoint ", out, "/step_", step)));
}

TEST_F(FinetuneLoopTest, RunsToTheEndWithoutASignal) {
  loop_.save_every = 8;
  ASSERT_TRUE(RunTrainingLoop(loop_, progress_).ok());
  EXPECT_EQ(progress_.step, 16);
  EXPECT_THAT(saved_, ElementsAre(8, 16));
  EXPECT_TRUE(logger_.closed);
}

// Raised as the step's loss is logged: after the step's compute, before its validation/save.
TEST_F(FinetuneLoopTest, SignalDuringAStepStopsAtItsEnd) {
  logger_.on_log = [](const Metrics& m, int64_t step) {
    if (step == 3 && m[0].first == "loss") raise(SIGTERM);
  };
  const absl::Status st = RunTrainingLoop(loop_, progress_);
  ExpectStoppedBySigterm(st, 3, out_);
  EXPECT_EQ(progress_.step, 3);
  EXPECT_THAT(saved_, ElementsAre(3));
  EXPECT_EQ(progress_.last_checkpoint, out_ + "/step_3");
  EXPECT_FALSE(logger_.Logged("loss", 4));
  EXPECT_TRUE(logger_.closed);
  // The handler is gone with the loop: SIGTERM has its old disposition again.
  struct sigaction now;
  ASSERT_EQ(sigaction(SIGTERM, nullptr, &now), 0);
  EXPECT_EQ(now.sa_handler, SIG_DFL);
}

TEST_F(FinetuneLoopTest, SignalDuringValidationStopsAtThatStep) {
  loop_.val_loader = &*val_loader_;
  loop_.eval_every = 2;
  logger_.on_log = [](const Metrics& m, int64_t step) {
    if (step == 4 && m[0].first == "val_loss") raise(SIGTERM);
  };
  const absl::Status st = RunTrainingLoop(loop_, progress_);
  ExpectStoppedBySigterm(st, 4, out_);
  EXPECT_TRUE(logger_.Logged("val_loss", 2));
  EXPECT_THAT(saved_, ElementsAre(4));
}

// A signal during a periodic save: that save is the checkpoint; no second one is written.
TEST_F(FinetuneLoopTest, SignalDuringASaveStopsWithoutSavingTwice) {
  loop_.save_every = 2;
  on_save = [](int64_t step) {
    if (step == 4) raise(SIGTERM);
    return absl::OkStatus();
  };
  const absl::Status st = RunTrainingLoop(loop_, progress_);
  ExpectStoppedBySigterm(st, 4, out_);
  EXPECT_THAT(saved_, ElementsAre(2, 4));
}

TEST_F(FinetuneLoopTest, FailedSaveRemovesItsFolderAndNamesTheLastGood) {
  loop_.save_every = 2;
  on_save = [this](int64_t step) {
    if (step < 4) return absl::OkStatus();
    fs::create_directories(out_ + "/step_4");
    std::ofstream(out_ + "/step_4/config.json") << "{}";
    return absl::InternalError("write 'x.tmp' (for 'x'): No space left on device");
  };
  const absl::Status st = RunTrainingLoop(loop_, progress_);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(InterruptSignal(st), std::nullopt);
  EXPECT_THAT(st.message(),
              HasSubstr(absl::StrCat("saving checkpoint ", out_, "/step_4 at step 4 failed: write "
                                     "'x.tmp' (for 'x'): No space left on device; the last good "
                                     "checkpoint is ", out_, "/step_2 (LATEST still names it)")));
  EXPECT_FALSE(fs::exists(out_ + "/step_4"));
  EXPECT_TRUE(IsCompleteCheckpoint(out_ + "/step_2"));
  EXPECT_EQ(ValueOrDie(LatestCheckpointDir(out_)), out_ + "/step_2");
}

TEST_F(FinetuneLoopTest, LeftoversAreRemovedBeforeTheFirstStep) {
  fs::create_directories(out_ + "/step_40");
  std::ofstream(out_ + "/step_40/.model.safetensors.tmp.1.0") << "partial";
  std::ofstream(out_ + "/.LATEST.tmp.1.1") << "step_40\n";
  bool clean_at_first_step = false;
  logger_.on_log = [&](const Metrics&, int64_t step) {
    if (step == 1) {
      clean_at_first_step =
          !fs::exists(out_ + "/step_40") && !fs::exists(out_ + "/.LATEST.tmp.1.1");
    }
  };
  ASSERT_TRUE(RunTrainingLoop(loop_, progress_).ok());
  EXPECT_TRUE(clean_at_first_step);
}

// keep_last_n_checkpoints counts LATEST's folder among the kept ones and never removes it,
// even when an older run left higher-numbered folders; incomplete folders are left to
// RemoveCheckpointLeftovers.
TEST(PruneCheckpointsTest, KeepsTheNewestAndNeverLatests) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string out = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/prune");
  fs::remove_all(out);
  for (int step : {1, 2, 3, 4, 9}) {
    const std::string dir = absl::StrCat(out, "/step_", step);
    fs::create_directories(dir);
    std::ofstream(dir + "/config.json") << "{}";
    std::ofstream(absl::StrCat(dir, "/", kRecipeStateFile)) << "x";
  }
  fs::create_directories(out + "/step_7");  // incomplete
  absl::StatusOr<std::vector<std::string>> removed = PruneCheckpoints(out, "step_3", 2);
  ASSERT_TRUE(removed.ok()) << removed.status();
  // Kept: step_3 (LATEST) and the newest other one, step_9.
  EXPECT_THAT(*removed, ::testing::UnorderedElementsAre(out + "/step_4", out + "/step_2",
                                                        out + "/step_1"));
  EXPECT_TRUE(fs::exists(out + "/step_3"));
  EXPECT_TRUE(fs::exists(out + "/step_9"));
  EXPECT_TRUE(fs::exists(out + "/step_7"));
  removed = PruneCheckpoints(out, "step_3", 1);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_THAT(*removed, ElementsAre(out + "/step_9"));
  EXPECT_TRUE(fs::exists(out + "/step_3"));
}

}  // namespace
}  // namespace cctune
