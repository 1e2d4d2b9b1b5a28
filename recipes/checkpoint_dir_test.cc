#include "recipes/checkpoint_dir.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cctune {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string TestDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp ? tmp : "/tmp", "/checkpoint_dir_test/", name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void Write(const std::string& path, const std::string& contents) {
  std::ofstream(path, std::ios::binary) << contents;
}

// What a finished save leaves: weights, config.json, then the recipe state.
void MakeCheckpoint(const std::string& dir) {
  fs::create_directories(dir);
  Write(dir + "/config.json", "{}");
  Write(dir + "/model.safetensors", "weights");
  Write(dir + "/recipe_state.safetensors", "state");
}

std::set<std::string> Tree(const std::string& root) {
  std::set<std::string> names;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    names.insert(e.path().lexically_relative(root).string());
  }
  return names;
}

TEST(CheckpointDirTest, NamesAndCompleteness) {
  EXPECT_EQ(CheckpointName(12), "step_12");
  const std::string out = TestDir("complete");
  MakeCheckpoint(out + "/step_1");
  EXPECT_TRUE(IsCompleteCheckpoint(out + "/step_1"));
  fs::create_directories(out + "/step_2");
  Write(out + "/step_2/config.json", "{}");
  Write(out + "/step_2/model.safetensors", "weights");  // killed before the recipe state
  EXPECT_FALSE(IsCompleteCheckpoint(out + "/step_2"));
  EXPECT_FALSE(IsCompleteCheckpoint(out + "/step_3"));
}

TEST(CheckpointDirTest, LatestNamesACompleteFolderInside) {
  const std::string out = TestDir("latest_ok");
  MakeCheckpoint(out + "/step_4");
  Write(out + "/LATEST", "step_4\n");
  absl::StatusOr<std::string> dir = LatestCheckpointDir(out);
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_EQ(*dir, out + "/step_4");
  // A symlink to another folder inside output_dir stays inside.
  ASSERT_EQ(symlink("step_4", (out + "/final").c_str()), 0);
  Write(out + "/LATEST", "final\n");
  dir = LatestCheckpointDir(out);
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_EQ(*dir, out + "/final");
}

TEST(CheckpointDirTest, NoLatestIsNotFound) {
  const std::string out = TestDir("latest_none");
  absl::StatusOr<std::string> dir = LatestCheckpointDir(out);
  EXPECT_EQ(dir.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(dir.status().message(), HasSubstr(out + "/LATEST does not exist"));
}

// Each LATEST that would resume from somewhere else than a complete checkpoint of this
// output_dir is refused, naming the file, its content and why.
TEST(CheckpointDirTest, BadLatestIsAClearError) {
  const std::string root = TestDir("latest_bad");
  const std::string out = root + "/run";
  MakeCheckpoint(out + "/step_2");
  MakeCheckpoint(root + "/other/step_9");  // another run's complete checkpoint
  fs::create_directories(out + "/step_3");  // a save that was killed
  Write(out + "/step_3/config.json", "{}");
  Write(out + "/notes.txt", "not a folder");
  ASSERT_EQ(symlink((root + "/other/step_9").c_str(), (out + "/escape").c_str()), 0);
  ASSERT_EQ(symlink("../other/step_9", (out + "/escape_relative").c_str()), 0);
  ASSERT_EQ(symlink("missing", (out + "/dangling").c_str()), 0);
  struct Case {
    std::string content, why;
  };
  const Case cases[] = {
      {"", "it is empty"},
      {"\n", "it is empty"},
      {root + "/other/step_9\n", "an absolute path"},
      {"../other/step_9\n", "a path, not a folder name"},
      {"step_2/\n", "a path, not a folder name"},
      {"./step_2\n", "a path, not a folder name"},
      {"..\n", "not a checkpoint folder"},
      {".\n", "not a checkpoint folder"},
      {"step_2\nstep_3\n", "not one folder name on one line"},
      {"step_7\n", "no such folder"},
      {"dangling\n", "no such folder"},
      {"escape\n", "a symlink that leads out of output_dir"},
      {"escape_relative\n", "a symlink that leads out of output_dir"},
      {"notes.txt\n", "not a folder"},
      {"step_3\n", "an incomplete checkpoint"},
  };
  for (const Case& c : cases) {
    Write(out + "/LATEST", c.content);
    absl::StatusOr<std::string> dir = LatestCheckpointDir(out);
    ASSERT_FALSE(dir.ok()) << "LATEST '" << c.content << "' gave " << *dir;
    EXPECT_EQ(dir.status().code(), absl::StatusCode::kInvalidArgument) << c.content;
    const std::string msg(dir.status().message());
    EXPECT_THAT(msg, HasSubstr(out + "/LATEST contains '")) << c.content;
    EXPECT_THAT(msg, HasSubstr(c.why)) << c.content;
    EXPECT_THAT(msg, HasSubstr("directly inside output_dir " + out)) << c.content;
  }
  Write(out + "/LATEST", "../other/step_9\n");
  EXPECT_THAT(std::string(LatestCheckpointDir(out).status().message()),
              HasSubstr("contains '../other/step_9'"));
}

TEST(CheckpointDirTest, LeftoversOfFailedSavesAreRemoved) {
  const std::string root = TestDir("leftovers");
  const std::string out = root + "/run";
  MakeCheckpoint(out + "/step_4");  // LATEST
  MakeCheckpoint(out + "/step_6");  // complete, LATEST not yet moved: kept
  Write(out + "/LATEST", "step_4\n");
  fs::create_directories(out + "/step_8");  // killed mid-save
  Write(out + "/step_8/.model.safetensors.tmp.123.0", "partial");
  Write(out + "/step_4/.config.json.tmp.77.3", "partial");
  Write(out + "/.LATEST.tmp.123.4", "step_8\n");
  fs::create_directories(out + "/logs");
  Write(out + "/logs/metrics.jsonl", "{}\n");
  Write(out + "/notes.tmp", "the user's");
  fs::create_directories(out + "/step_notes");
  // A symlink to an incomplete folder elsewhere: neither it nor its target is touched.
  fs::create_directories(root + "/elsewhere");
  Write(root + "/elsewhere/.x.tmp.1.1", "theirs");
  ASSERT_EQ(symlink((root + "/elsewhere").c_str(), (out + "/step_10").c_str()), 0);

  absl::StatusOr<std::vector<std::string>> removed = RemoveCheckpointLeftovers(out);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(std::set<std::string>(removed->begin(), removed->end()),
            (std::set<std::string>{out + "/step_8", out + "/step_4/.config.json.tmp.77.3",
                                   out + "/.LATEST.tmp.123.4"}));
  EXPECT_EQ(Tree(out), (std::set<std::string>{
                           "LATEST", "logs", "logs/metrics.jsonl", "notes.tmp", "step_notes",
                           "step_10", "step_4", "step_4/config.json",
                           "step_4/model.safetensors", "step_4/recipe_state.safetensors",
                           "step_6", "step_6/config.json", "step_6/model.safetensors",
                           "step_6/recipe_state.safetensors"}));
  EXPECT_TRUE(fs::exists(root + "/elsewhere/.x.tmp.1.1"));
  // Nothing left: a second pass removes nothing.
  removed = RemoveCheckpointLeftovers(out);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_TRUE(removed->empty());
  // A missing output_dir (a first run) has nothing to clean.
  removed = RemoveCheckpointLeftovers(root + "/not_yet");
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_TRUE(removed->empty());
}

TEST(CheckpointDirTest, LatestProtectsItsFolderEvenIncomplete) {
  const std::string out = TestDir("latest_protects");
  fs::create_directories(out + "/step_5");
  Write(out + "/step_5/model.safetensors", "weights");
  Write(out + "/LATEST", "step_5\n");
  absl::StatusOr<std::vector<std::string>> removed = RemoveCheckpointLeftovers(out);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_TRUE(removed->empty());
  EXPECT_TRUE(fs::exists(out + "/step_5/model.safetensors"));
}

TEST(CheckpointDirTest, AFailedSaveLeavesOnlyTheLastGoodCheckpoint) {
  const std::string out = TestDir("failed_save");
  MakeCheckpoint(out + "/step_4");
  Write(out + "/LATEST", "step_4\n");
  MakeCheckpoint(out + "/step_6");  // complete, but LATEST could not be moved to it
  Write(out + "/.LATEST.tmp.9.9", "step_6\n");
  ASSERT_TRUE(RemoveFailedCheckpoint(out, "step_6").ok());
  EXPECT_EQ(Tree(out), (std::set<std::string>{"LATEST", "step_4", "step_4/config.json",
                                              "step_4/model.safetensors",
                                              "step_4/recipe_state.safetensors"}));
  // The folder LATEST names is never removed.
  ASSERT_TRUE(RemoveFailedCheckpoint(out, "step_4").ok());
  EXPECT_TRUE(IsCompleteCheckpoint(out + "/step_4"));
}

}  // namespace
}  // namespace cctune
