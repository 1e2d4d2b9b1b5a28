#include "core/backend_library.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace cctune {
namespace {

std::string SelfExe() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  return std::string(buf, static_cast<size_t>(n));
}

std::string Dirname(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

bool Exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

}  // namespace

const char* BackendLibraryName(DeviceType type) {
  return type == DeviceType::kCUDA ? "libcctune_cuda.so" : "";
}

std::vector<std::string> LibraryCandidates(const std::string& file, const std::string& package,
                                           const char* env_var) {
  if (const char* env = env_var != nullptr ? std::getenv(env_var) : nullptr;
      env != nullptr && *env != '\0') {
    return {env};
  }
  std::vector<std::string> out;
  const std::string exe = SelfExe();
  const std::string rel = "cctune/" + package + "/" + file;
  if (!exe.empty()) {
    out.push_back(Dirname(exe) + "/" + file);
    out.push_back(Dirname(exe) + "/../lib/" + file);
    out.push_back(exe + ".runfiles/" + rel);
  }
  if (const char* srcdir = std::getenv("TEST_SRCDIR"); srcdir != nullptr && *srcdir != '\0') {
    out.push_back(std::string(srcdir) + "/" + rel);
  }
  if (const char* dir = std::getenv("RUNFILES_DIR"); dir != nullptr && *dir != '\0') {
    out.push_back(std::string(dir) + "/" + rel);
  }
  // Each place once ($TEST_SRCDIR and $RUNFILES_DIR are often the same folder).
  std::vector<std::string> unique;
  for (std::string& p : out) {
    if (std::find(unique.begin(), unique.end(), p) == unique.end()) unique.push_back(std::move(p));
  }
  return unique;
}

absl::Status OpenLibrary(const std::vector<std::string>& candidates) {
  std::vector<std::string> tried_paths;
  for (const std::string& path : candidates) {
    if (!Exists(path)) {
      tried_paths.push_back(absl::StrCat(path, " (no such file)"));
      continue;
    }
    // RTLD_GLOBAL: what it opens (cudart, cuBLAS) stays available to later libraries.
    if (::dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL) != nullptr) return absl::OkStatus();
    const char* err = ::dlerror();
    tried_paths.push_back(absl::StrCat(path, " (", err != nullptr ? err : "dlopen failed", ")"));
  }
  return absl::UnavailableError(absl::StrCat(
      "tried ", tried_paths.empty() ? "nothing" : absl::StrJoin(tried_paths, "; ")));
}

std::vector<std::string> BackendLibraryCandidates(DeviceType type) {
  const std::string name = BackendLibraryName(type);
  if (name.empty()) return {};
  return LibraryCandidates(name, "kernels/cuda", "CCTUNE_CUDA_LIBRARY");
}

absl::Status LoadBackendLibrary(DeviceType type) {
  static std::mutex mu;
  static absl::Status results[kNumDeviceTypes];
  static bool tried[kNumDeviceTypes] = {};
  std::lock_guard<std::mutex> lock(mu);
  const int t = static_cast<int>(type);
  if (tried[t]) return results[t];
  tried[t] = true;
  const std::string name = BackendLibraryName(type);
  if (name.empty()) return results[t] = absl::OkStatus();
  absl::Status opened = OpenLibrary(BackendLibraryCandidates(type));
  if (opened.ok()) return results[t] = opened;
  return results[t] = absl::UnavailableError(absl::StrCat(
             "cuda needs the CUDA backend library ", name,
             " and the CUDA runtime it links (libcudart, libcublas), but it could not be "
             "loaded: ",
             opened.message(), ". Set CCTUNE_CUDA_LIBRARY to its path (bazel build //kernels/cuda:",
             name, "), or add the CUDA toolkit's lib64 to LD_LIBRARY_PATH"));
}

}  // namespace cctune
