#include "training/metric_logger.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status.h"
#include "nlohmann/json.hpp"
#include "training/event.pb.h"

namespace cctune {

double WallTimeSeconds() {
  using Clock = std::chrono::system_clock;
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

absl::Status MakeDirectories(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir)) {
    return absl::PermissionDeniedError(absl::StrCat("cannot create log directory '", dir,
                                                    "': ", ec ? ec.message() : "not a directory"));
  }
  return absl::OkStatus();
}

// ---- StdoutLogger ----

absl::Status StdoutLogger::LogDict(const Metrics& metrics, int64_t step) {
  std::string line = absl::StrCat("Step ", step, " |");
  for (const auto& [name, value] : metrics) {
    absl::StrAppend(&line, " ", name, ":", absl::StrFormat("%.6g", value));
  }
  line.push_back('\n');
  if (std::fwrite(line.data(), 1, line.size(), out_) != line.size() || std::fflush(out_) != 0) {
    return absl::DataLossError(absl::StrCat("StdoutLogger: write failed: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

// ---- JsonlLogger ----

absl::StatusOr<std::unique_ptr<JsonlLogger>> JsonlLogger::Create(const std::string& log_dir,
                                                                 const std::string& filename) {
  if (filename.empty() || filename.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("JsonlLogger: filename '", filename, "' must be a plain file name"));
  }
  CCTUNE_RETURN_IF_ERROR(MakeDirectories(log_dir));
  std::string path = absl::StrCat(log_dir, "/", filename);
  std::FILE* f = std::fopen(path.c_str(), "ab");
  if (f == nullptr) {
    return absl::PermissionDeniedError(
        absl::StrCat("JsonlLogger: cannot open '", path, "': ", std::strerror(errno)));
  }
  return std::unique_ptr<JsonlLogger>(new JsonlLogger(std::move(path), f));
}

JsonlLogger::~JsonlLogger() { Close().IgnoreError(); }

absl::Status JsonlLogger::LogDict(const Metrics& metrics, int64_t step) {
  if (file_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("JsonlLogger: '", path_, "' is closed"));
  }
  nlohmann::ordered_json j;
  j["step"] = step;
  for (const auto& [name, value] : metrics) {
    if (name == "step") {
      return absl::InvalidArgumentError(
          "JsonlLogger: a metric may not be called 'step' (it is the step key)");
    }
    if (std::isfinite(value)) {
      j[name] = value;
    } else {
      j[name] = nullptr;
    }
  }
  const std::string line = j.dump() + "\n";
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0) {
    return absl::DataLossError(
        absl::StrCat("JsonlLogger: writing '", path_, "': ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status JsonlLogger::Close() {
  if (file_ == nullptr) return absl::OkStatus();
  const int rc = std::fclose(file_);
  file_ = nullptr;
  if (rc != 0) {
    return absl::DataLossError(
        absl::StrCat("JsonlLogger: closing '", path_, "': ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

// ---- TensorBoardLogger ----

absl::StatusOr<std::unique_ptr<TensorBoardLogger>> TensorBoardLogger::Create(
    const std::string& log_dir, const TensorBoardLoggerOptions& options) {
  CCTUNE_RETURN_IF_ERROR(MakeDirectories(log_dir));
  std::string host = options.hostname;
  if (host.empty()) {
    char buf[256] = {0};
    if (::gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') {
      host = "localhost";
    } else {
      host = buf;
    }
  }
  const double start = options.start_time >= 0 ? options.start_time : WallTimeSeconds();
  const std::string base = absl::StrCat(log_dir, "/events.out.tfevents.",
                                        static_cast<int64_t>(std::floor(start)), ".", host);
  std::string path = base;
  for (int i = 1; std::filesystem::exists(path); ++i) path = absl::StrCat(base, ".", i);

  CCTUNE_ASSIGN_OR_RETURN(std::unique_ptr<TFRecordWriter> writer, TFRecordWriter::Open(path));
  tensorboard::Event event;
  event.set_wall_time(start);
  event.set_step(0);
  event.set_file_version("brain.Event:2");
  CCTUNE_RETURN_IF_ERROR(writer->Write(event.SerializeAsString()));
  CCTUNE_RETURN_IF_ERROR(writer->Flush());
  return std::unique_ptr<TensorBoardLogger>(new TensorBoardLogger(std::move(writer)));
}

absl::Status TensorBoardLogger::LogDict(const Metrics& metrics, int64_t step) {
  tensorboard::Event event;
  event.set_wall_time(WallTimeSeconds());
  event.set_step(step);
  tensorboard::Summary* summary = event.mutable_summary();
  for (const auto& [name, value] : metrics) {
    tensorboard::Summary::Value* v = summary->add_value();
    v->set_tag(name);
    v->set_simple_value(static_cast<float>(value));
  }
  CCTUNE_RETURN_IF_ERROR(writer_->Write(event.SerializeAsString()));
  return writer_->Flush();
}

absl::Status TensorBoardLogger::Close() { return writer_->Close(); }

}  // namespace cctune
