#include "recipes/checkpoint_dir.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "checkpoint/atomic_file.h"
#include "core/status.h"

namespace cctune {
namespace {

namespace fs = std::filesystem;

constexpr char kConfigFile[] = "config.json";

bool IsRegularFile(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

// step_<digits>: the only folders this file ever removes.
bool IsStepName(const std::string& name) {
  absl::string_view rest = name;
  return absl::ConsumePrefix(&rest, "step_") && !rest.empty() &&
         std::all_of(rest.begin(), rest.end(), absl::ascii_isdigit);
}

// LATEST's content without the newline, or "" when it cannot be read: for cleaning up, where
// a LATEST that does not validate must still protect the folder it names.
std::string LatestNameOrEmpty(const std::string& output_dir) {
  absl::StatusOr<std::string> latest = ReadFileToString(absl::StrCat(output_dir, "/", kLatestFile));
  if (!latest.ok()) return "";
  return std::string(absl::StripAsciiWhitespace(*latest));
}

absl::Status Remove(const fs::path& path, std::vector<std::string>& removed) {
  std::error_code ec;
  fs::remove_all(path, ec);  // does not follow symlinks
  if (ec) {
    return absl::InternalError(
        absl::StrCat("removing the leftover '", path.string(), "': ", ec.message()));
  }
  removed.push_back(path.string());
  return absl::OkStatus();
}

}  // namespace

std::string CheckpointName(int64_t step) { return absl::StrCat("step_", step); }

bool IsCompleteCheckpoint(const std::string& dir) {
  std::error_code ec;
  return fs::is_directory(dir, ec) && IsRegularFile(fs::path(dir) / kConfigFile) &&
         IsRegularFile(fs::path(dir) / kRecipeStateFile);
}

absl::StatusOr<std::string> LatestCheckpointDir(const std::string& output_dir) {
  const std::string latest_path = absl::StrCat(output_dir, "/", kLatestFile);
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(latest_path, ec))) {
    return absl::NotFoundError(absl::StrCat(
        "resume_from_checkpoint: true, but ", latest_path,
        " does not exist (no checkpoint was saved in output_dir ", output_dir, ")"));
  }
  CCTUNE_ASSIGN_OR_RETURN(const std::string content, ReadFileToString(latest_path));
  const std::string name(absl::StripAsciiWhitespace(content));
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        latest_path, " contains '", absl::CHexEscape(name), "': ", why,
        "; LATEST must name a complete checkpoint folder directly inside output_dir ",
        output_dir));
  };
  if (name.empty()) return bad("it is empty");
  if (name.front() == '/') return bad("an absolute path");
  if (name.find('/') != std::string::npos) return bad("a path, not a folder name");
  if (name == "." || name == "..") return bad("not a checkpoint folder");
  if (std::any_of(name.begin(), name.end(),
                  [](char c) { return absl::ascii_iscntrl(static_cast<unsigned char>(c)); })) {
    return bad("not one folder name on one line");
  }
  const fs::path dir = fs::path(output_dir) / name;
  const fs::file_status link = fs::symlink_status(dir, ec);
  if (!fs::exists(link) || !fs::exists(dir, ec)) return bad("no such folder");
  if (fs::is_symlink(link)) {
    // Inside output_dir is fine (a renamed folder); anywhere else would resume another run.
    const fs::path target = fs::canonical(dir, ec);
    const fs::path base = fs::canonical(output_dir, ec);
    if (ec || target.parent_path() != base) {
      return bad(absl::StrCat("a symlink that leads out of output_dir (to ", target.string(),
                              ")"));
    }
  }
  if (!fs::is_directory(dir, ec)) return bad("not a folder");
  if (!IsCompleteCheckpoint(dir.string())) {
    return bad(absl::StrCat("an incomplete checkpoint (no ", kConfigFile, " or ",
                            kRecipeStateFile, ": a save that did not finish)"));
  }
  return dir.string();
}

absl::StatusOr<std::vector<std::string>> RemoveCheckpointLeftovers(
    const std::string& output_dir) {
  std::vector<std::string> removed;
  std::error_code ec;
  if (!fs::is_directory(output_dir, ec)) return removed;
  const std::string latest = LatestNameOrEmpty(output_dir);
  std::vector<fs::path> leftovers, kept;
  for (const fs::directory_entry& entry : fs::directory_iterator(output_dir, ec)) {
    const std::string name = entry.path().filename().string();
    const fs::file_status st = entry.symlink_status(ec);
    if (fs::is_regular_file(st) && IsAtomicWriteTemporary(name)) {
      leftovers.push_back(entry.path());
    } else if (fs::is_directory(st) && (IsStepName(name) || name == latest)) {
      if (name != latest && !IsCompleteCheckpoint(entry.path().string())) {
        leftovers.push_back(entry.path());
      } else {
        kept.push_back(entry.path());
      }
    }
  }
  if (ec) {
    return absl::InternalError(absl::StrCat("listing '", output_dir, "': ", ec.message()));
  }
  for (const fs::path& dir : kept) {
    for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
      if (fs::is_regular_file(entry.symlink_status(ec)) &&
          IsAtomicWriteTemporary(entry.path().filename().string())) {
        leftovers.push_back(entry.path());
      }
    }
  }
  for (const fs::path& p : leftovers) CCTUNE_RETURN_IF_ERROR(Remove(p, removed));
  return removed;
}

absl::Status RemoveFailedCheckpoint(const std::string& output_dir, const std::string& name) {
  std::vector<std::string> removed;
  const fs::path dir = fs::path(output_dir) / name;
  std::error_code ec;
  if (name != LatestNameOrEmpty(output_dir) && fs::is_directory(fs::symlink_status(dir, ec))) {
    CCTUNE_RETURN_IF_ERROR(Remove(dir, removed));
  }
  return RemoveCheckpointLeftovers(output_dir).status();
}

}  // namespace cctune
