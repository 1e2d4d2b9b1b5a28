// Metric loggers as config components (kind "metric_logger"), with torchtune's names and keys:
//   cctune.training.metric_logging.StdoutLogger       no keys
//   cctune.training.metric_logging.DiskLogger         log_dir; writes JSON lines (JsonlLogger)
//                                                     to <log_dir>/<filename>
//   cctune.training.metric_logging.JsonlLogger        the same
//   cctune.training.metric_logging.TensorBoardLogger  log_dir, organize_logs (default true:
//                                                     files go to <log_dir>/run_0_<unix time>,
//                                                     as torchtune does for rank 0)
// torchtune.training.metric_logging.* and the older torchtune.utils.metric_logging.* resolve
// to these. Unlike torchtune's DiskLogger (plain text lines), DiskLogger here writes JSONL,
// which tools can read back.
#ifndef CCTUNE_TRAINING_METRIC_LOGGER_COMPONENTS_H_
#define CCTUNE_TRAINING_METRIC_LOGGER_COMPONENTS_H_

#include <memory>

#include "absl/status/status.h"
#include "config/registry.h"
#include "training/metric_logger.h"

namespace cctune {

using MetricLoggerRegistryT = Registry<std::unique_ptr<MetricLogger>>;
// Component kind "metric_logger".
MetricLoggerRegistryT& MetricLoggerRegistry();

// Registers the loggers above (idempotent, thread-safe).
absl::Status RegisterMetricLoggers();

}  // namespace cctune

#endif  // CCTUNE_TRAINING_METRIC_LOGGER_COMPONENTS_H_
