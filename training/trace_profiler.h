// torchtune's `profiler:` section (setup_torch_profiler) for cctune's training loop: on the
// steps its schedule selects, each step's data loading, forward, backward and optimizer time
// become complete ("ph": "X") events of a Chrome trace-event JSON file, which chrome://tracing
// and Perfetto open. The schedule is torch.profiler.schedule's: cycles of wait_steps idle,
// warmup_steps idle (torch warms its tracer up; there is nothing to warm here), then
// active_steps recorded, num_cycles times (0: forever), counting the steps this run trains.
//   TraceProfiler p(options);
//   if (p.Recording(k)) p.AddStep(step, phases);
//   p.Write();  // <output_dir>/trace.json, atomically
#ifndef CCTUNE_TRAINING_TRACE_PROFILER_H_
#define CCTUNE_TRAINING_TRACE_PROFILER_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "config/node.h"
#include "config/schema.h"

namespace cctune {

struct TraceProfilerOptions {
  bool enabled = false;
  std::string output_dir;
  int64_t wait_steps = 0, warmup_steps = 0, active_steps = 1, num_cycles = 1;
};

// The `profiler` map's schema: torchtune's keys (cpu, cuda, profile_memory, with_stack,
// record_shapes, with_flops are accepted; the trace has the step phases either way).
Schema TraceProfilerSchema();
// The options of a `profiler` node (null or absent: disabled); `default_output_dir` when it
// has no output_dir.
absl::StatusOr<TraceProfilerOptions> ReadTraceProfilerOptions(const ConfigNode* node,
                                                              const std::string& default_output_dir);

class TraceProfiler {
 public:
  explicit TraceProfiler(TraceProfilerOptions options) : options_(std::move(options)) {}

  bool enabled() const { return options_.enabled; }
  // Whether the `index`-th step this run trains (0-based) is recorded.
  bool Recording(int64_t index) const;
  // Records optimizer step `step`: `phases` are (name, seconds) in the order they ran, the
  // first starting at `start_seconds` (since any fixed origin).
  void AddStep(int64_t step, double start_seconds,
               const std::vector<std::pair<std::string, double>>& phases);
  // The trace so far as JSON text.
  std::string ToJson() const;
  // Writes <output_dir>/trace.json atomically (folders created); OK and nothing written when
  // disabled. Returns the path.
  absl::StatusOr<std::string> Write() const;

 private:
  struct Event {
    std::string name;
    int64_t step;
    double ts_us, dur_us;
  };
  TraceProfilerOptions options_;
  std::vector<Event> events_;
};

}  // namespace cctune

#endif  // CCTUNE_TRAINING_TRACE_PROFILER_H_
