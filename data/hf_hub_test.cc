#include "data/hf_hub.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cctune {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string Msg(const absl::Status& s) { return std::string(s.message()); }

void Write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

class HfHubTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(std::getenv("TEST_TMPDIR")) /
            ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(root_);
    fs::create_directories(root_);
    for (const char* v : {"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"}) {
      unsetenv(v);
    }
    setenv("HF_HOME", (root_ / "hf_home").c_str(), 1);
  }

  fs::path Hub() const { return root_ / "hf_home" / "hub"; }

  // A repo as huggingface-cli leaves it: refs/main -> snapshots/<hash>/<file> -> ../blobs/<id>.
  fs::path AddRepo(const std::string& folder, const std::string& hash,
                   const std::vector<std::pair<std::string, std::string>>& files) {
    const fs::path repo = Hub() / folder;
    Write(repo / "refs" / "main", hash);
    int blob = 0;
    for (const auto& [name, text] : files) {
      const fs::path link = repo / "snapshots" / hash / name;
      const fs::path target = repo / "blobs" / ("blob" + std::to_string(blob++));
      Write(target, text);
      fs::create_directories(link.parent_path());
      fs::create_symlink(fs::relative(target, link.parent_path()), link);
    }
    return repo / "snapshots" / hash;
  }

  fs::path root_;
};

TEST_F(HfHubTest, CacheDirFollowsHuggingfaceHubOrder) {
  EXPECT_EQ(HfHubCacheDir().dir, Hub().string());
  EXPECT_EQ(HfHubCacheDir().from, "HF_HOME");
  setenv("HUGGINGFACE_HUB_CACHE", "/old/name", 1);
  EXPECT_EQ(HfHubCacheDir().dir, "/old/name");
  setenv("HF_HUB_CACHE", "/explicit/hub", 1);
  EXPECT_EQ(HfHubCacheDir().dir, "/explicit/hub");
  EXPECT_EQ(HfHubCacheDir().from, "HF_HUB_CACHE");
  unsetenv("HF_HUB_CACHE");
  unsetenv("HUGGINGFACE_HUB_CACHE");
  unsetenv("HF_HOME");
  setenv("XDG_CACHE_HOME", "/xdg", 1);
  EXPECT_EQ(HfHubCacheDir().dir, "/xdg/huggingface/hub");
  unsetenv("XDG_CACHE_HOME");
  const std::string home = std::getenv("HOME") != nullptr ? std::getenv("HOME") : "";
  setenv("HOME", "/home/u", 1);
  EXPECT_EQ(HfHubCacheDir().dir, "/home/u/.cache/huggingface/hub");
  EXPECT_EQ(HfHubCacheDir().from, "");
  setenv("HF_HUB_CACHE", "~/hub", 1);  // a leading ~ is the home folder
  EXPECT_EQ(HfHubCacheDir().dir, "/home/u/hub");
  setenv("HOME", home.c_str(), 1);
}

TEST_F(HfHubTest, RepoIds) {
  EXPECT_TRUE(IsHfRepoId("yahma/alpaca-cleaned"));
  EXPECT_TRUE(IsHfRepoId("Open-Orca/SlimOrca-Dedup"));
  EXPECT_TRUE(IsHfRepoId("samsum"));
  EXPECT_FALSE(IsHfRepoId("a/b/c"));
  EXPECT_FALSE(IsHfRepoId("/abs/path"));
  EXPECT_FALSE(IsHfRepoId("../x"));
  EXPECT_FALSE(IsHfRepoId("a b/c"));
}

TEST_F(HfHubTest, SnapshotFollowsRefsMain) {
  const fs::path snap = AddRepo("datasets--yahma--alpaca-cleaned", "abc123", {{"a.json", "[]"}});
  auto dir = HfDatasetSnapshot("yahma/alpaca-cleaned");
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_EQ(*dir, snap.string());
  // A commit hash with a snapshot is a revision too.
  auto by_hash = HfDatasetSnapshot("yahma/alpaca-cleaned", "abc123");
  ASSERT_TRUE(by_hash.ok()) << by_hash.status();
  EXPECT_EQ(*by_hash, snap.string());
  auto no_rev = HfDatasetSnapshot("yahma/alpaca-cleaned", "v2");
  EXPECT_EQ(no_rev.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Msg(no_rev.status()), HasSubstr("no revision 'v2'"));
  EXPECT_THAT(Msg(no_rev.status()),
              HasSubstr("huggingface-cli download --repo-type dataset yahma/alpaca-cleaned "
                        "--revision v2"));
}

TEST_F(HfHubTest, MissingDatasetNamesCacheAndDownloadCommand) {
  auto s = HfDatasetSnapshot("tatsu-lab/alpaca");
  ASSERT_EQ(s.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Msg(s.status()),
              HasSubstr((Hub() / "datasets--tatsu-lab--alpaca").string() + "' does not exist"));
  EXPECT_THAT(Msg(s.status()), HasSubstr("from $HF_HOME"));
  EXPECT_THAT(Msg(s.status()),
              HasSubstr("download it with: huggingface-cli download --repo-type dataset "
                        "tatsu-lab/alpaca"));
  // refs/main naming a snapshot that is not there.
  Write(Hub() / "datasets--a--b" / "refs" / "main", "deadbeef\n");
  auto broken = HfDatasetSnapshot("a/b");
  EXPECT_THAT(Msg(broken.status()), HasSubstr("names commit 'deadbeef'"));
}

TEST_F(HfHubTest, SplitWordsFollowHuggingFaceNaming) {
  EXPECT_EQ(InferSplitFromPath("data/train-00000-of-00001.parquet"), "train");
  EXPECT_EQ(InferSplitFromPath("validation.jsonl"), "validation");
  EXPECT_EQ(InferSplitFromPath("dev/part.json"), "validation");
  EXPECT_EQ(InferSplitFromPath("my_test_set.json"), "test");
  EXPECT_EQ(InferSplitFromPath("Eval2.json"), "test");
  EXPECT_EQ(InferSplitFromPath("alpaca_data_cleaned.json"), "");
  EXPECT_EQ(InferSplitFromPath("contest.json"), "");  // a word, not a substring
  EXPECT_EQ(InferSplitFromPath("trainer.json"), "");
}

TEST_F(HfHubTest, ResolvesSplitsInASnapshot) {
  const fs::path snap = AddRepo("datasets--org--ds", "h1",
                                {{"data/train-0.jsonl", "{}"},
                                 {"data/train-1.jsonl", "{}"},
                                 {"data/test.jsonl", "{}"},
                                 {"README.md", "# card"},
                                 {".gitattributes", "*"}});
  DataSourceOptions o;
  o.source = "org/ds";
  auto train = ResolveDataSource(o);
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_THAT(train->files, ElementsAre((snap / "data/train-0.jsonl").string(),
                                        (snap / "data/train-1.jsonl").string()));
  EXPECT_THAT(train->description, HasSubstr("org/ds (train: "));
  o.split = "eval";  // an alias of test
  auto test = ResolveDataSource(o);
  ASSERT_TRUE(test.ok()) << test.status();
  EXPECT_THAT(test->files, ElementsAre((snap / "data/test.jsonl").string()));
  o.split = "validation";
  auto none = ResolveDataSource(o);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Msg(none.status()), HasSubstr("no split 'validation'"));
  EXPECT_THAT(Msg(none.status()), HasSubstr("its splits: test, train"));
}

TEST_F(HfHubTest, UnnamedFilesAreTrain) {
  const fs::path snap = AddRepo("datasets--yahma--alpaca-cleaned", "c0ffee",
                                {{"alpaca_data_cleaned.json", "[]"}, {"README.md", "x"}});
  DataSourceOptions o;
  o.source = "yahma/alpaca-cleaned";
  auto r = ResolveDataSource(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->files, ElementsAre((snap / "alpaca_data_cleaned.json").string()));
  o.split = "test";
  EXPECT_THAT(Msg(ResolveDataSource(o).status()), HasSubstr("its splits: train"));
}

TEST_F(HfHubTest, ParquetResolvesOtherFormatsDoNot) {
  const fs::path snap =
      AddRepo("datasets--tatsu-lab--alpaca", "p1", {{"data/train-00000-of-00001.parquet", "PAR1"}});
  DataSourceOptions o;
  o.source = "tatsu-lab/alpaca";
  auto parquet = ResolveDataSource(o);
  ASSERT_TRUE(parquet.ok()) << parquet.status();
  EXPECT_THAT(parquet->files, ElementsAre((snap / "data/train-00000-of-00001.parquet").string()));

  AddRepo("datasets--org--tabular", "t1", {{"train.csv", "a,b\n1,2\n"}});
  o.source = "org/tabular";
  auto csv = ResolveDataSource(o);
  EXPECT_EQ(csv.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(Msg(csv.status()), HasSubstr("train.csv': this format cannot be read yet"));
  EXPECT_THAT(Msg(csv.status()), HasSubstr("convert it to JSON lines"));
  EXPECT_THAT(Msg(csv.status()), HasSubstr("source: json"));

  AddRepo("datasets--x--script", "s1", {{"script.py", "import datasets"}, {"README.md", "x"}});
  o.source = "x/script";
  auto script = ResolveDataSource(o);
  EXPECT_EQ(script.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Msg(script.status()), HasSubstr("has no data files"));
  EXPECT_THAT(Msg(script.status()), HasSubstr("loading script (script.py)"));

  o.source = "csv";
  EXPECT_EQ(ResolveDataSource(o).status().code(), absl::StatusCode::kUnimplemented);
}

TEST_F(HfHubTest, NameDataDirAndDataFiles) {
  const fs::path snap = AddRepo("datasets--w--wiki", "n1",
                                {{"wikitext-2/train.jsonl", "{}"},
                                 {"wikitext-2/extra/a.jsonl", "{}"},
                                 {"wikitext-103/train.jsonl", "{}"}});
  DataSourceOptions o;
  o.source = "w/wiki";
  o.name = "wikitext-2";
  auto r = ResolveDataSource(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->files, ElementsAre((snap / "wikitext-2/train.jsonl").string()));
  o.data_dir = "extra";
  r = ResolveDataSource(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->files, ElementsAre((snap / "wikitext-2/extra/a.jsonl").string()));
  o.data_dir = "";
  o.name = "wikitext-3";
  EXPECT_THAT(Msg(ResolveDataSource(o).status()),
              HasSubstr("the folders there are wikitext-103, wikitext-2"));
  o.name = "";
  o.data_files = {"wikitext-1*/*.jsonl"};
  r = ResolveDataSource(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->files, ElementsAre((snap / "wikitext-103/train.jsonl").string()));
  o.data_files = {"./*.jsonl"};  // `*` stays in its folder: nothing at the top
  EXPECT_EQ(ResolveDataSource(o).status().code(), absl::StatusCode::kNotFound);
  o.data_files = {"nope/*.jsonl"};
  EXPECT_EQ(ResolveDataSource(o).status().code(), absl::StatusCode::kNotFound);
  o.data_files = {"wikitext-2/train.jsonl"};
  o.split = "test";
  EXPECT_THAT(Msg(ResolveDataSource(o).status()), HasSubstr("hold one split, 'train'"));
}

TEST_F(HfHubTest, DanglingBlobLinkIsAnError) {
  const fs::path snap = AddRepo("datasets--o--partial", "d1", {{"train.jsonl", "{}"}});
  fs::remove_all(Hub() / "datasets--o--partial" / "blobs");
  DataSourceOptions o;
  o.source = "o/partial";
  auto r = ResolveDataSource(o);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Msg(r.status()), HasSubstr((snap / "train.jsonl").string() + "' does not exist"));
  EXPECT_THAT(Msg(r.status()), HasSubstr("huggingface-cli download --repo-type dataset o/partial"));
}

TEST_F(HfHubTest, LocalFilesFoldersAndJsonLoader) {
  Write(root_ / "local" / "train.jsonl", "{}");
  Write(root_ / "local" / "valid.jsonl", "{}");
  DataSourceOptions o;
  o.source = (root_ / "local").string();
  o.split = "validation";
  auto folder = ResolveDataSource(o);
  ASSERT_TRUE(folder.ok()) << folder.status();
  EXPECT_THAT(folder->files, ElementsAre((root_ / "local" / "valid.jsonl").string()));

  o.source = (root_ / "local" / "train.jsonl").string();
  EXPECT_THAT(Msg(ResolveDataSource(o).status()), HasSubstr("hold one split, 'train'"));
  o.split = "train";
  auto file = ResolveDataSource(o);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_THAT(file->files, ElementsAre(o.source));

  o.source = "json";
  EXPECT_THAT(Msg(ResolveDataSource(o).status()), HasSubstr("needs data_files"));
  o.data_files = {(root_ / "local" / "*.jsonl").string()};
  auto glob = ResolveDataSource(o);
  ASSERT_TRUE(glob.ok()) << glob.status();
  EXPECT_THAT(glob->files, ElementsAre((root_ / "local" / "train.jsonl").string(),
                                       (root_ / "local" / "valid.jsonl").string()));
  o.data_files = {"/no/such/file.json"};
  EXPECT_THAT(Msg(ResolveDataSource(o).status()),
              HasSubstr("dataset file '/no/such/file.json' does not exist"));
  o.source = "no/such-dataset";
  o.data_files.clear();
  EXPECT_THAT(Msg(ResolveDataSource(o).status()),
              HasSubstr("huggingface-cli download --repo-type dataset no/such-dataset"));
  o.source = "missing/file.jsonl/x";
  EXPECT_THAT(Msg(ResolveDataSource(o).status()), HasSubstr("does not exist"));
}

}  // namespace
}  // namespace cctune
