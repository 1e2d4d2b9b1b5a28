#include "data/hf_hub.h"

#include <fnmatch.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "core/status.h"

namespace cctune {
namespace {

namespace fs = std::filesystem;

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

// huggingface_hub expands a leading "~".
std::string ExpandUser(std::string path) {
  if (path == "~" || absl::StartsWith(path, "~/")) path = Env("HOME") + path.substr(1);
  return path;
}

std::string Join(const std::string& a, const std::string& b) {
  return (fs::path(a) / fs::path(b)).lexically_normal().string();
}

bool IsDir(const std::string& p) {
  std::error_code ec;
  return fs::is_directory(p, ec);
}

bool Exists(const std::string& p) {
  std::error_code ec;
  return fs::exists(p, ec);  // follows links: a link to a missing blob does not exist
}

std::string CacheWhere(const HfHubCache& cache) {
  return cache.from.empty() ? absl::StrCat("the default cache ", cache.dir,
                                           "; set HF_HUB_CACHE or HF_HOME to use another")
                            : absl::StrCat("the cache ", cache.dir, ", from $", cache.from);
}

enum class FileKind { kReadable, kUnsupported, kOther };

// By extension, as Hugging Face's packaged loaders go.
FileKind KindOf(absl::string_view path) {
  const std::string lower = absl::AsciiStrToLower(path);
  for (const char* ext : {".json", ".jsonl", ".parquet"}) {
    if (absl::EndsWith(lower, ext)) return FileKind::kReadable;
  }
  for (const char* ext : {".csv", ".tsv", ".txt", ".arrow", ".gz", ".zst", ".bz2", ".xz", ".zip",
                          ".7z", ".tar", ".lz4", ".pdf", ".xml", ".sql"}) {
    if (absl::EndsWith(lower, ext)) return FileKind::kUnsupported;
  }
  return FileKind::kOther;
}

std::string ConvertHint(const std::string& file) {
  return absl::StrCat(
      "'", file,
      "': this format cannot be read yet (JSON, JSON lines and Parquet are); convert it to JSON "
      "lines, e.g. python3 -c \"import datasets; datasets.load_dataset('<csv|text|arrow>', "
      "data_files='",
      file,
      "', split='train').to_json('data.jsonl')\", then use source: json, data_files: "
      "data.jsonl");
}

// Regular files (links followed) under `dir`, relative and sorted; names starting with '.'
// (.gitattributes, .cache/) are skipped.
absl::StatusOr<std::vector<std::string>> ListFiles(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, fs::directory_options::follow_directory_symlink, ec);
  if (ec) return absl::NotFoundError(absl::StrCat("cannot list '", dir, "': ", ec.message()));
  for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) return absl::DataLossError(absl::StrCat("listing '", dir, "': ", ec.message()));
    const std::string name = it->path().filename().string();
    if (!name.empty() && name[0] == '.') {
      if (it->is_directory(ec)) it.disable_recursion_pending();
      continue;
    }
    if (it->is_directory(ec)) continue;
    // Dangling links (a blob not downloaded) are kept, so that choosing one is an error.
    out.push_back(it->path().lexically_relative(dir).string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool HasGlob(absl::string_view s) { return s.find_first_of("*?[") != absl::string_view::npos; }

// Hugging Face's split keywords, canonical name first.
const std::vector<std::vector<std::string>>& SplitKeywords() {
  static const auto* const k =
      new std::vector<std::vector<std::string>>{{"train", "training"},
                                                {"validation", "valid", "val", "dev"},
                                                {"test", "testing", "eval", "evaluation"}};
  return *k;
}

std::string CanonicalSplit(const std::string& split) {
  for (const auto& words : SplitKeywords()) {
    if (std::find(words.begin(), words.end(), split) != words.end()) return words[0];
  }
  return split;
}

std::string Shorten(const std::vector<std::string>& items, size_t max = 8) {
  if (items.empty()) return "none";
  std::vector<std::string> head(items.begin(), items.begin() + std::min(max, items.size()));
  std::string s = absl::StrJoin(head, ", ");
  if (items.size() > max) absl::StrAppend(&s, ", ... (", items.size(), " in all)");
  return s;
}

absl::Status CheckReadable(const std::vector<std::string>& files, const std::string& source) {
  for (const std::string& f : files) {
    if (!Exists(f)) {
      return absl::NotFoundError(absl::StrCat(
          "dataset file '", f, "' does not exist",
          IsHfRepoId(source) && !Exists(source)
              ? absl::StrCat(" (a link to a blob that was not downloaded?); download it again "
                             "with: ",
                             HfDatasetDownloadCommand(source))
              : ""));
    }
  }
  return absl::OkStatus();
}

// data_files entries relative to `base` ("": as given); a glob's `*` stays within a folder.
absl::StatusOr<std::vector<std::string>> ExpandDataFiles(const std::vector<std::string>& patterns,
                                                         const std::string& base) {
  std::vector<std::string> out;
  for (const std::string& p : patterns) {
    if (p.empty()) return absl::InvalidArgumentError("data_files has an empty entry");
    const std::string path = base.empty() || fs::path(p).is_absolute()
                                 ? fs::path(p).lexically_normal().string()
                                 : Join(base, p);
    if (!HasGlob(p)) {
      out.push_back(path);
      continue;
    }
    // Match below the pattern's longest folder prefix without glob characters.
    fs::path dir = fs::path(path).parent_path();
    while (HasGlob(dir.string())) dir = dir.parent_path();
    const std::string root = dir.empty() ? "." : dir.string();
    CCTUNE_ASSIGN_OR_RETURN(std::vector<std::string> files, ListFiles(root));
    size_t matched = 0;
    for (const std::string& f : files) {
      const std::string full = dir.empty() ? f : Join(root, f);
      if (fnmatch(path.c_str(), full.c_str(), FNM_PATHNAME) == 0) {
        out.push_back(full);
        ++matched;
      }
    }
    if (matched == 0) {
      return absl::NotFoundError(
          absl::StrCat("data_files pattern '", p, "' matches no file in '", root, "'"));
    }
  }
  return out;
}

std::string Describe(const std::string& source, const std::string& split,
                     const std::vector<std::string>& files) {
  if (files.size() == 1 && files[0] == source) return source;
  return absl::StrCat(source, " (", split, ": ", Shorten(files, 3), ")");
}

// Explicit files: the single split "train".
absl::Status OnlyTrain(const DataSourceOptions& o, const std::string& what) {
  if (CanonicalSplit(o.split) == "train") return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("split '", o.split, "': ", what,
                   " hold one split, 'train' (optionally sliced, e.g. train[:90%]); give a dict "
                   "data_files: {",
                   o.split, ": <file>} for more"));
}

// A snapshot or local folder.
absl::StatusOr<ResolvedDataSource> ResolveFolder(const DataSourceOptions& o,
                                                 const std::string& root) {
  std::string base = root;
  for (const std::string* sub : {&o.name, &o.data_dir}) {
    if (sub->empty()) continue;
    const std::string next = Join(base, *sub);
    if (!IsDir(next)) {
      std::vector<std::string> folders;
      std::error_code ec;
      for (const auto& e : fs::directory_iterator(base, ec)) {
        if (e.is_directory(ec) && e.path().filename().string()[0] != '.') {
          folders.push_back(e.path().filename().string());
        }
      }
      std::sort(folders.begin(), folders.end());
      return absl::InvalidArgumentError(
          absl::StrCat(sub == &o.name ? "name (subset) '" : "data_dir '", *sub, "': no folder '",
                       next, "'; the folders there are ", Shorten(folders),
                       sub == &o.name ? " (set name: null for a dataset without configs)" : ""));
    }
    base = next;
  }
  if (!o.data_files.empty()) {
    CCTUNE_RETURN_IF_ERROR(OnlyTrain(o, "data_files"));
    CCTUNE_ASSIGN_OR_RETURN(std::vector<std::string> files, ExpandDataFiles(o.data_files, base));
    for (const std::string& f : files) {
      if (KindOf(f) == FileKind::kUnsupported) return absl::UnimplementedError(ConvertHint(f));
    }
    CCTUNE_RETURN_IF_ERROR(CheckReadable(files, o.source));
    return ResolvedDataSource{files, Describe(o.source, o.split, files)};
  }
  CCTUNE_ASSIGN_OR_RETURN(const std::vector<std::string> all, ListFiles(base));
  std::vector<std::string> data;
  for (const std::string& f : all) {
    if (KindOf(f) != FileKind::kOther) data.push_back(f);
  }
  if (data.empty()) {
    std::vector<std::string> scripts;
    for (const std::string& f : all) {
      if (absl::EndsWith(f, ".py")) scripts.push_back(f);
    }
    return absl::NotFoundError(absl::StrCat(
        "dataset '", o.source, "': '", base, "' has no data files (.json, .jsonl, .parquet, ...); ",
        "its files: ", Shorten(all),
        scripts.empty() ? ""
                        : absl::StrCat("; its loading script (", Shorten(scripts),
                                       ") cannot be run here: convert the data to JSON lines")));
  }
  bool any_named = false;
  for (const std::string& f : data) any_named = any_named || !InferSplitFromPath(f).empty();
  const std::string want = CanonicalSplit(o.split);
  std::vector<std::string> json, other, splits;
  for (const std::string& f : data) {
    std::string s = any_named ? InferSplitFromPath(f) : "train";
    if (!s.empty() && std::find(splits.begin(), splits.end(), s) == splits.end()) {
      splits.push_back(s);
    }
    if (s != want) continue;
    (KindOf(f) == FileKind::kReadable ? json : other).push_back(Join(base, f));
  }
  if (json.empty() && other.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("dataset '", o.source, "' has no split '",
                                                   o.split, "' in '", base,
                                                   "'; its splits: ", Shorten(splits)));
  }
  if (json.empty()) return absl::UnimplementedError(ConvertHint(other[0]));
  CCTUNE_RETURN_IF_ERROR(CheckReadable(json, o.source));
  return ResolvedDataSource{json, Describe(o.source, want, json)};
}

}  // namespace

HfHubCache HfHubCacheDir() {
  for (const char* var : {"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"}) {
    if (std::string v = Env(var); !v.empty()) return {ExpandUser(v), var};
  }
  if (std::string v = Env("HF_HOME"); !v.empty()) return {Join(ExpandUser(v), "hub"), "HF_HOME"};
  if (std::string v = Env("XDG_CACHE_HOME"); !v.empty()) {
    return {Join(ExpandUser(v), "huggingface/hub"), "XDG_CACHE_HOME"};
  }
  return {Join(Env("HOME"), ".cache/huggingface/hub"), ""};
}

bool IsHfRepoId(absl::string_view s) {
  const std::vector<absl::string_view> parts = absl::StrSplit(s, '/');
  if (parts.size() > 2) return false;
  for (absl::string_view p : parts) {
    if (p.empty() || p == "." || p == "..") return false;
    for (char c : p) {
      if (!absl::ascii_isalnum(c) && c != '-' && c != '_' && c != '.') return false;
    }
  }
  return true;
}

std::string HfDatasetDownloadCommand(const std::string& repo_id) {
  return absl::StrCat("huggingface-cli download --repo-type dataset ", repo_id);
}

absl::StatusOr<std::string> HfDatasetSnapshot(const std::string& repo_id,
                                              const std::string& revision) {
  if (!IsHfRepoId(repo_id)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", repo_id, "' is not a Hugging Face repo id (org/name)"));
  }
  const HfHubCache cache = HfHubCacheDir();
  const std::string repo_dir =
      Join(cache.dir, absl::StrCat("datasets--", absl::StrReplaceAll(repo_id, {{"/", "--"}})));
  const std::string download =
      absl::StrCat("; download it with: ", HfDatasetDownloadCommand(repo_id),
                   revision == "main" ? "" : absl::StrCat(" --revision ", revision));
  if (!IsDir(repo_dir)) {
    return absl::NotFoundError(absl::StrCat("dataset '", repo_id,
                                            "' is not a local file or folder, nor in the Hugging "
                                            "Face hub cache: '",
                                            repo_dir, "' does not exist (", CacheWhere(cache), ")",
                                            download));
  }
  const std::string ref = Join(repo_dir, absl::StrCat("refs/", revision));
  if (std::ifstream in(ref); in) {
    std::string hash;
    std::getline(in, hash);
    hash = std::string(absl::StripAsciiWhitespace(hash));
    const std::string snap = Join(repo_dir, absl::StrCat("snapshots/", hash));
    if (hash.empty() || !IsDir(snap)) {
      return absl::NotFoundError(absl::StrCat("dataset '", repo_id, "': ", ref, " names commit '",
                                              hash, "' but '", snap, "' does not exist", download));
    }
    return snap;
  }
  const std::string by_hash = Join(repo_dir, absl::StrCat("snapshots/", revision));
  if (revision.find('/') == std::string::npos && IsDir(by_hash)) return by_hash;
  return absl::NotFoundError(absl::StrCat("dataset '", repo_id, "': no revision '", revision,
                                          "' in '", repo_dir, "' (no ", ref, ")", download));
}

std::string InferSplitFromPath(absl::string_view relative_path) {
  std::vector<std::string> words =
      absl::StrSplit(relative_path, absl::ByAnyChar("-._ /0123456789"), absl::SkipEmpty());
  for (std::string& w : words) w = absl::AsciiStrToLower(w);
  for (const auto& keywords : SplitKeywords()) {
    for (const std::string& k : keywords) {
      if (std::find(words.begin(), words.end(), k) != words.end()) return keywords[0];
    }
  }
  return "";
}

absl::StatusOr<ResolvedDataSource> ResolveDataSource(const DataSourceOptions& o) {
  if (o.source.empty()) return absl::InvalidArgumentError("dataset source is empty");
  if (o.split.empty()) return absl::InvalidArgumentError("dataset split is empty");
  if (o.source == "json" || o.source == "parquet") {
    if (o.data_files.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("source '", o.source, "' needs data_files: the local file(s)"));
    }
    CCTUNE_RETURN_IF_ERROR(OnlyTrain(o, "data_files"));
    CCTUNE_ASSIGN_OR_RETURN(std::vector<std::string> files, ExpandDataFiles(o.data_files, ""));
    CCTUNE_RETURN_IF_ERROR(CheckReadable(files, o.source));
    return ResolvedDataSource{files, Describe(o.source, o.split, files)};
  }
  for (const char* loader : {"csv", "text", "arrow", "pandas", "webdataset"}) {
    if (o.source == loader) {
      return absl::UnimplementedError(absl::StrCat(
          "source '", loader, "' (Hugging Face's ", loader,
          " loader) cannot be read; convert the files to JSON lines and use source: json"));
    }
  }
  if (IsDir(o.source)) return ResolveFolder(o, o.source);
  if (Exists(o.source)) {
    if (!o.data_files.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "data_files is used with source: json or a dataset folder (source is the file '",
          o.source, "')"));
    }
    CCTUNE_RETURN_IF_ERROR(OnlyTrain(o, "local files"));
    if (KindOf(o.source) == FileKind::kUnsupported) {
      return absl::UnimplementedError(ConvertHint(o.source));
    }
    return ResolvedDataSource{{o.source}, Describe(o.source, o.split, {o.source})};
  }
  if (!IsHfRepoId(o.source) || KindOf(o.source) != FileKind::kOther) {
    return absl::NotFoundError(absl::StrCat("dataset file '", o.source, "' does not exist"));
  }
  CCTUNE_ASSIGN_OR_RETURN(const std::string snapshot, HfDatasetSnapshot(o.source, o.revision));
  return ResolveFolder(o, snapshot);
}

}  // namespace cctune
