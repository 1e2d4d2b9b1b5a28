#include "training/metric_logger_components.h"

#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace cctune {
namespace {

constexpr char kPrefix[] = "cctune.training.metric_logging.";

Schema JsonlSchema(const std::string& doc) {
  return Schema("", doc)
      .Required("log_dir", KeyType::String(), "directory of the log file (created if missing)")
      .Default("filename", KeyType::String(), ConfigNode::String("metrics.jsonl"),
               "file name inside log_dir; appended to by resumed runs");
}

absl::StatusOr<std::unique_ptr<MetricLogger>> MakeJsonl(const ConfigNode& node) {
  CCTUNE_ASSIGN_OR_RETURN(std::string dir, node.GetString("log_dir"));
  CCTUNE_ASSIGN_OR_RETURN(std::string filename, node.GetString("filename"));
  CCTUNE_ASSIGN_OR_RETURN(std::unique_ptr<JsonlLogger> logger, JsonlLogger::Create(dir, filename));
  return std::unique_ptr<MetricLogger>(std::move(logger));
}

}  // namespace

MetricLoggerRegistryT& MetricLoggerRegistry() {
  static MetricLoggerRegistryT* const r = new MetricLoggerRegistryT("metric_logger");
  return *r;
}

absl::Status RegisterMetricLoggers() {
  static const absl::Status status = [] {
    MetricLoggerRegistryT& r = MetricLoggerRegistry();
    CCTUNE_RETURN_IF_ERROR(
        r.Register(absl::StrCat(kPrefix, "StdoutLogger"),
                   Schema("", "\"Step N | name:value ...\" lines on stdout"),
                   [](const ConfigNode&) -> absl::StatusOr<std::unique_ptr<MetricLogger>> {
                     return std::unique_ptr<MetricLogger>(new StdoutLogger());
                   }));
    CCTUNE_RETURN_IF_ERROR(r.Register(absl::StrCat(kPrefix, "JsonlLogger"),
                                      JsonlSchema("one JSON object per step, appended"),
                                      MakeJsonl));
    CCTUNE_RETURN_IF_ERROR(r.Register(
        absl::StrCat(kPrefix, "DiskLogger"),
        JsonlSchema("torchtune's DiskLogger; here one JSON object per step (JsonlLogger)"),
        MakeJsonl));
    CCTUNE_RETURN_IF_ERROR(r.Register(
        absl::StrCat(kPrefix, "TensorBoardLogger"),
        Schema("", "TensorBoard event file (scalars)")
            .Required("log_dir", KeyType::String(), "directory of the event files")
            .Default("organize_logs", KeyType::Bool(), ConfigNode::Bool(true),
                     "write into <log_dir>/run_0_<unix time> (torchtune's layout)"),
        [](const ConfigNode& node) -> absl::StatusOr<std::unique_ptr<MetricLogger>> {
          CCTUNE_ASSIGN_OR_RETURN(std::string dir, node.GetString("log_dir"));
          CCTUNE_ASSIGN_OR_RETURN(bool organize, node.GetBool("organize_logs"));
          TensorBoardLoggerOptions options;
          options.start_time = WallTimeSeconds();
          if (organize) {
            dir =
                absl::StrCat(dir, "/run_0_", static_cast<int64_t>(std::floor(options.start_time)));
          }
          CCTUNE_ASSIGN_OR_RETURN(std::unique_ptr<TensorBoardLogger> logger,
                                  TensorBoardLogger::Create(dir, options));
          return std::unique_ptr<MetricLogger>(std::move(logger));
        }));
    for (const char* name : {"StdoutLogger", "DiskLogger", "TensorBoardLogger"}) {
      CCTUNE_RETURN_IF_ERROR(r.AddAlias(absl::StrCat("torchtune.utils.metric_logging.", name),
                                        absl::StrCat(kPrefix, name)));
    }
    return absl::OkStatus();
  }();
  return status;
}

}  // namespace cctune
