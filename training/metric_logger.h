// Metric loggers: where a recipe sends its scalars (loss, lr, tokens/sec, grad norm, peak
// memory) every log_every_n_steps, with torchtune's interface (log, log_dict, close):
//   StdoutLogger       "Step 12 | loss:2.31046 lr:0.0003" lines on stdout;
//   JsonlLogger        one JSON object per line, {"step": 12, "loss": 2.31046, ...}, appended
//                      to <log_dir>/<filename> and flushed at every write (a resumed run
//                      continues the same file);
//   TensorBoardLogger  <log_dir>/events.out.tfevents.<unix time>.<host>: TFRecord framing,
//                      a first "brain.Event:2" file_version event, then one Event per
//                      LogDict whose Summary holds a simple_value per metric.
//
//   CCTUNE_ASSIGN_OR_RETURN(auto logger, TensorBoardLogger::Create(output_dir + "/logs"));
//   CCTUNE_RETURN_IF_ERROR(logger->LogDict({{"loss", loss}, {"lr", lr}}, step));
#ifndef CCTUNE_TRAINING_METRIC_LOGGER_H_
#define CCTUNE_TRAINING_METRIC_LOGGER_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "training/tfrecord.h"

namespace cctune {

// Name -> value, in the order they should be shown.
using Metrics = std::vector<std::pair<std::string, double>>;

class MetricLogger {
 public:
  virtual ~MetricLogger() = default;
  virtual absl::Status LogDict(const Metrics& metrics, int64_t step) = 0;
  absl::Status Log(std::string_view name, double value, int64_t step) {
    return LogDict({{std::string(name), value}}, step);
  }
  // Flushes and releases the file; later writes fail. Idempotent.
  virtual absl::Status Close() { return absl::OkStatus(); }
};

class StdoutLogger final : public MetricLogger {
 public:
  // `out` is not owned (stdout by default; tests pass a temporary file).
  explicit StdoutLogger(std::FILE* out = stdout) : out_(out) {}
  absl::Status LogDict(const Metrics& metrics, int64_t step) override;

 private:
  std::FILE* out_;
};

class JsonlLogger final : public MetricLogger {
 public:
  // Creates log_dir (and parents) when missing, and opens <log_dir>/<filename> for appending.
  static absl::StatusOr<std::unique_ptr<JsonlLogger>> Create(
      const std::string& log_dir, const std::string& filename = "metrics.jsonl");
  ~JsonlLogger() override;
  // Non-finite values are written as null (JSON has no NaN or Infinity).
  absl::Status LogDict(const Metrics& metrics, int64_t step) override;
  absl::Status Close() override;
  const std::string& path() const { return path_; }

 private:
  JsonlLogger(std::string path, std::FILE* file) : path_(std::move(path)), file_(file) {}
  std::string path_;
  std::FILE* file_;
};

struct TensorBoardLoggerOptions {
  // Empty: gethostname(). Becomes the file name's last part.
  std::string hostname;
  // < 0: the current time. Seconds since the epoch, for the file name and the first event.
  double start_time = -1;
};

class TensorBoardLogger final : public MetricLogger {
 public:
  // Creates log_dir when missing and a new event file in it (a ".1", ".2", ... suffix keeps an
  // existing file of the same second and host intact), then writes the file_version event.
  static absl::StatusOr<std::unique_ptr<TensorBoardLogger>> Create(
      const std::string& log_dir, const TensorBoardLoggerOptions& options = {});
  // Values are stored as float32 (TensorBoard's simple_value); wall_time is the current time.
  absl::Status LogDict(const Metrics& metrics, int64_t step) override;
  absl::Status Close() override;
  const std::string& path() const { return writer_->path(); }

 private:
  explicit TensorBoardLogger(std::unique_ptr<TFRecordWriter> writer) : writer_(std::move(writer)) {}
  std::unique_ptr<TFRecordWriter> writer_;
};

// Seconds since the Unix epoch, with sub-second precision.
double WallTimeSeconds();

// mkdir -p; errors name the directory.
absl::Status MakeDirectories(const std::string& dir);

}  // namespace cctune

#endif  // CCTUNE_TRAINING_METRIC_LOGGER_H_
