// Where a dataset's files are: torchtune's `source` (+ data_files, name, data_dir, split)
// resolved the way Hugging Face's load_dataset would find them, offline:
//
//   source: json / parquet            a loader name; data_files lists the local files
//   source: path/to/file.jsonl        one local file (the split "train")
//   source: path/to/folder            a local folder, searched as a snapshot is (below)
//   source: org/name                  a dataset in the local Hugging Face hub cache, as
//                                     `huggingface-cli download --repo-type dataset org/name`
//                                     leaves it:
//     <cache>/datasets--org--name/refs/<revision>      the commit hash of the revision
//     <cache>/datasets--org--name/snapshots/<hash>/... the files (often symlinks into blobs/)
//   with <cache> = $HF_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub,
//   else ~/.cache/huggingface/hub (huggingface_hub's order; HUGGINGFACE_HUB_CACHE, the older
//   name, is honoured after HF_HUB_CACHE).
//
// In a snapshot or folder, `name` (a config, torchtune's `subset`) and `data_dir` pick a
// sub-folder; data_files (relative to it; globs: `*` within one folder, `?`, `[...]`) pick
// files; otherwise every data file is a candidate. Files are sorted into splits by Hugging
// Face's naming rule: a path word (split at - . _ space, digits and /) "train"/"training",
// "validation"/"valid"/"val"/"dev" or "test"/"testing"/"eval"/"evaluation" names the split;
// when no file names one, every file is "train". README.md `configs:` metadata is not read.
//
// JSON (.json, an array of objects or JSON lines), JSON lines (.jsonl) and Parquet (.parquet,
// data/parquet_records.h) are read. CSV, text, Arrow and compressed files, and the csv / text
// / arrow loaders, are an Unimplemented error naming the file and how to convert it to JSON
// lines; a dataset that is in neither place is NotFound with the paths searched and the
// download command.
#ifndef CCTUNE_DATA_HF_HUB_H_
#define CCTUNE_DATA_HF_HUB_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cctune {

// The hub cache folder and the environment variable that chose it (empty: the default).
struct HfHubCache {
  std::string dir;
  std::string from;  // "HF_HUB_CACHE", "HF_HOME", ... or "" for ~/.cache/huggingface/hub
};
HfHubCache HfHubCacheDir();

// "org/name" or "name", each part of letters, digits, '-', '_' and '.' (not "." or "..").
bool IsHfRepoId(absl::string_view s);

// "huggingface-cli download --repo-type dataset <repo_id>".
std::string HfDatasetDownloadCommand(const std::string& repo_id);

// The snapshot folder of dataset `repo_id` at `revision` (a name in refs/, or a commit hash
// with a snapshot). NotFound names the folder searched and gives the download command.
absl::StatusOr<std::string> HfDatasetSnapshot(const std::string& repo_id,
                                              const std::string& revision = "main");

// "train", "validation", "test", or "" when `relative_path` names no split.
std::string InferSplitFromPath(absl::string_view relative_path);

struct DataSourceOptions {
  std::string source;
  std::vector<std::string> data_files;  // empty: every data file of the split
  std::string name;                     // a config (sub-folder) of a snapshot / folder
  std::string data_dir;                 // a sub-folder of a snapshot / folder
  std::string split = "train";          // a split's name, without a [slice]
  std::string revision = "main";
};

struct ResolvedDataSource {
  std::vector<std::string> files;  // JSON / JSONL / Parquet files, in order
  std::string description;         // "yahma/alpaca-cleaned (train: <snapshot>/x.json)"
};

// Errors: InvalidArgument (bad keys, no such split; listing the splits found), NotFound
// (missing files or dataset, with the download command), Unimplemented (unreadable formats).
absl::StatusOr<ResolvedDataSource> ResolveDataSource(const DataSourceOptions& options);

}  // namespace cctune

#endif  // CCTUNE_DATA_HF_HUB_H_
