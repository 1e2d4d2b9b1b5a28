// Writes a deterministic metric log to a directory with every logger, for checking the files
// with other tools (tools/golden/check_tensorboard.py reads them with TensorBoard's reader):
//   bazel run //training:write_metrics_example -- /tmp/cctune_tb
// Step s in [0, 50) logs loss = 3 exp(-s / 20) + 0.1 sin(s), lr = 1e-3 * s / 50, zero = 0,
// negative = -s.
#include <cmath>
#include <cstdio>
#include <string>

#include "core/status.h"
#include "training/metric_logger.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTPUT_DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  auto tb = cctune::ValueOrDie(cctune::TensorBoardLogger::Create(dir));
  auto jsonl = cctune::ValueOrDie(cctune::JsonlLogger::Create(dir));
  for (int s = 0; s < 50; ++s) {
    const cctune::Metrics m = {{"loss", 3.0 * std::exp(-s / 20.0) + 0.1 * std::sin(s)},
                               {"lr", 1e-3 * s / 50.0},
                               {"zero", 0.0},
                               {"negative", -static_cast<double>(s)}};
    CCTUNE_CHECK_OK(tb->LogDict(m, s));
    CCTUNE_CHECK_OK(jsonl->LogDict(m, s));
  }
  CCTUNE_CHECK_OK(tb->Close());
  CCTUNE_CHECK_OK(jsonl->Close());
  std::printf("wrote %s and %s\n", tb->path().c_str(), jsonl->path().c_str());
  return 0;
}
