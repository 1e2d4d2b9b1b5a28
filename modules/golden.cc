#include "modules/golden.h"

#include <cstdlib>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/safetensors.h"
#include "core/status.h"

namespace cctune {
namespace testing {

int64_t Golden::Int(const std::string& key) const {
  int64_t v = 0;
  CCTUNE_CHECK(metadata.count(key) && absl::SimpleAtoi(metadata.at(key), &v), "golden ", path,
               ": metadata ", key);
  return v;
}

double Golden::Double(const std::string& key) const {
  double v = 0;
  CCTUNE_CHECK(metadata.count(key) && absl::SimpleAtod(metadata.at(key), &v), "golden ", path,
               ": metadata ", key);
  return v;
}

ops::RopePairing Golden::RopePairing() const {
  return metadata.at("rope") == "qwen2" ? ops::RopePairing::kHalfSplit
                                        : ops::RopePairing::kInterleaved;
}

std::optional<ops::RopeScaling> Golden::RopeScaling() const {
  if (metadata.at("rope") != "llama3_scaled") return std::nullopt;
  return ops::RopeScaling{};  // torchtune's Llama3ScaledRoPE defaults: 8, 1, 4, 8192
}

const Tensor& Golden::Io(const std::string& name) const {
  auto it = io.find(name);
  CCTUNE_CHECK(it != io.end(), "golden ", path, " has no io.", name);
  return it->second;
}

absl::StatusOr<Golden> LoadGolden(const std::string& name) {
  const std::string rel = "tests/assets/goldens/" + name;
  std::string path = rel;
  if (const char* srcdir = std::getenv("TEST_SRCDIR")) {
    const std::string candidate = absl::StrCat(srcdir, "/cctune/", rel);
    if (std::ifstream(candidate).good()) path = candidate;
  }
  CCTUNE_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::Open(path));
  Golden g;
  g.path = path;
  g.metadata = file.metadata();
  CCTUNE_ASSIGN_OR_RETURN(StateDict all, file.LoadAll());
  for (auto& [key, t] : all) {
    if (absl::StartsWith(key, "model.")) {
      g.weights[key.substr(6)] = t;
    } else if (absl::StartsWith(key, "io.")) {
      g.io[key.substr(3)] = t;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(path, ": unexpected tensor ", key));
    }
  }
  return g;
}

}  // namespace testing
}  // namespace cctune
