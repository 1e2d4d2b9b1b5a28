#include "training/trace_profiler.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "checkpoint/atomic_file.h"
#include "config/validate.h"
#include "core/status.h"
#include "nlohmann/json.hpp"

namespace cctune {

Schema TraceProfilerSchema() {
  Schema s("profiler", "torchtune.training.setup_torch_profiler: a Chrome trace of the steps");
  s.Optional("_component_", KeyType::Enum({"torchtune.training.setup_torch_profiler"}),
             "torchtune's profiler builder (the only one)")
      .Default("enabled", KeyType::Bool(), ConfigNode::Bool(false),
               "write <output_dir>/trace.json")
      .Optional("output_dir", KeyType::String(), "where the trace goes (default: the run's)");
  for (const char* key : {"cpu", "cuda", "xpu", "profile_memory", "with_stack", "record_shapes",
                          "with_flops"}) {
    s.Optional(key, KeyType::Bool(), "accepted (torch.profiler option); the trace is the same");
  }
  s.Optional("wait_steps", KeyType::Int().InRange(0, int64_t{1} << 40).OrNull(),
             "steps skipped at the start of each cycle (null: 0)")
      .Optional("warmup_steps", KeyType::Int().InRange(0, int64_t{1} << 40).OrNull(),
                "further steps skipped (torch's warm-up; null: 0)")
      .Optional("active_steps", KeyType::Int().InRange(1, int64_t{1} << 40).OrNull(),
                "steps recorded per cycle (null: 1)")
      .Optional("num_cycles", KeyType::Int().InRange(0, int64_t{1} << 40).OrNull(),
                "cycles (0: repeat forever; null: 1)");
  return s;
}

absl::StatusOr<TraceProfilerOptions> ReadTraceProfilerOptions(const ConfigNode* node,
                                                              const std::string& default_output_dir) {
  TraceProfilerOptions o;
  o.output_dir = default_output_dir + "/profiling_outputs";
  if (node == nullptr || node->IsNull()) return o;
  const ConfigNode n = WithDefaults(*node, TraceProfilerSchema());
  CCTUNE_ASSIGN_OR_RETURN(o.enabled, n.GetBool("enabled"));
  CCTUNE_ASSIGN_OR_RETURN(std::optional<std::string> dir, n.GetOptionalString("output_dir"));
  if (dir.has_value()) o.output_dir = *dir;
  const std::pair<const char*, int64_t*> ints[] = {{"wait_steps", &o.wait_steps},
                                                   {"warmup_steps", &o.warmup_steps},
                                                   {"active_steps", &o.active_steps},
                                                   {"num_cycles", &o.num_cycles}};
  for (const auto& [key, field] : ints) {
    CCTUNE_ASSIGN_OR_RETURN(std::optional<int64_t> v, n.GetOptionalInt(key));
    if (v.has_value()) *field = *v;
  }
  return o;
}

bool TraceProfiler::Recording(int64_t index) const {
  if (!options_.enabled || index < 0) return false;
  const int64_t period = options_.wait_steps + options_.warmup_steps + options_.active_steps;
  if (options_.num_cycles > 0 && index / period >= options_.num_cycles) return false;
  return index % period >= options_.wait_steps + options_.warmup_steps;
}

void TraceProfiler::AddStep(int64_t step, double start_seconds,
                            const std::vector<std::pair<std::string, double>>& phases) {
  double t = start_seconds * 1e6;
  for (const auto& [name, seconds] : phases) {
    events_.push_back({name, step, t, seconds * 1e6});
    t += seconds * 1e6;
  }
}

std::string TraceProfiler::ToJson() const {
  nlohmann::ordered_json events = nlohmann::ordered_json::array();
  for (const Event& e : events_) {
    nlohmann::ordered_json j;
    j["name"] = e.name;
    j["cat"] = "train";
    j["ph"] = "X";
    j["ts"] = e.ts_us;
    j["dur"] = e.dur_us;
    j["pid"] = 0;
    j["tid"] = 0;
    j["args"] = {{"step", e.step}};
    events.push_back(std::move(j));
  }
  nlohmann::ordered_json doc;
  doc["traceEvents"] = std::move(events);
  doc["displayTimeUnit"] = "ms";
  return doc.dump(1);
}

absl::StatusOr<std::string> TraceProfiler::Write() const {
  if (!options_.enabled) return std::string();
  std::error_code ec;
  std::filesystem::create_directories(options_.output_dir, ec);
  if (ec) {
    return absl::InternalError(absl::StrCat("profiler: cannot create output_dir ",
                                            options_.output_dir, ": ", ec.message()));
  }
  const std::string path = options_.output_dir + "/trace.json";
  CCTUNE_RETURN_IF_ERROR(WriteFileAtomically(path, ToJson() + "\n"));
  return path;
}

}  // namespace cctune
