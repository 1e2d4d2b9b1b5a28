#include "recipes/data_parallel_strategy.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

#include "absl/strings/str_cat.h"
#include "core/log.h"
#include "core/status.h"
#include "distributed/fsdp.h"

namespace cctune {

void DataParallelStrategy::ExtendSchema(Schema& schema) const {
  StrategyDecorator::ExtendSchema(schema);
  schema
      .Default("fsdp_reshard_after_forward", KeyType::Bool(), ConfigNode::Bool(true),
               "torchtune's FSDP2 key: release each layer's gathered weights after its forward "
               "and gather them again for its backward (true), or keep them from the forward "
               "to the backward (false); full_finetune_distributed only (docs/distributed.md)")
      .Default("fsdp_cpu_offload", KeyType::Bool(), ConfigNode::Bool(false),
               "torchtune's key; only false is supported")
      .Default("custom_sharded_layers", KeyType::Any().OrNull(), ConfigNode::Null(),
               "torchtune's key; accepted, ignored (every buffer is sharded as one)")
      .Default("global_batch_size", KeyType::Int().AtLeast(1).OrNull(), ConfigNode::Null(),
               "samples per optimizer step over all ranks; when set, batch_size (per rank) is "
               "global_batch_size / (ranks x gradient_accumulation_steps), which must divide "
               "exactly (null: batch_size as given)")
      .Default("distributed_backend", KeyType::Enum({"auto", "single", "mpi", "nccl"}),
               ConfigNode::String("auto"),
               "the process group: auto (single for one rank, nccl on cuda, else mpi)")
      .Default("distributed_timeout_seconds", KeyType::Float().GreaterThan(0),
               ConfigNode::Float(300),
               "every collective fails after this many seconds (a lost or stuck rank)");
}

void DataParallelStrategy::Validate(const ConfigNode& root, std::vector<ConfigError>* errors) const {
  StrategyDecorator::Validate(root, errors);
  auto error = [&](const char* key, std::string message) {
    ConfigError e;
    if (const ConfigNode* n = root.Find(key)) e.location = n->location();
    e.key = key;
    e.message = std::move(message);
    errors->push_back(std::move(e));
  };
  if (const ConfigNode* n = root.Find("fsdp_cpu_offload");
      n != nullptr && n->kind() == ConfigNode::Kind::kBool && n->bool_value()) {
    error("fsdp_cpu_offload", absl::StrCat(docs_.name, " does not offload to the CPU yet: set false"));
  }
  if (const ConfigNode* n = root.Find("optimizer_in_bwd");
      n != nullptr && n->kind() == ConfigNode::Kind::kBool && n->bool_value()) {
    error("optimizer_in_bwd", absl::StrCat(docs_.name, " does not support optimizer_in_bwd: set false"));
  }
}

absl::Status DataParallelStrategy::Configure(const ConfigNode& root) {
  CCTUNE_RETURN_IF_ERROR(StrategyDecorator::Configure(root));
  CCTUNE_ASSIGN_OR_RETURN(reshard_after_forward_, root.GetBool("fsdp_reshard_after_forward"));
  ProcessGroupOptions options;
  CCTUNE_ASSIGN_OR_RETURN(options.backend, root.GetString("distributed_backend"));
  CCTUNE_ASSIGN_OR_RETURN(options.timeout_seconds, root.GetFloat("distributed_timeout_seconds"));
  CCTUNE_ASSIGN_OR_RETURN(const std::string device, root.GetString("device"));
  CCTUNE_ASSIGN_OR_RETURN(const Device dev, ParseDevice(device));
  CCTUNE_ASSIGN_OR_RETURN(const DistributedEnv env, ReadDistributedEnv());
  CCTUNE_ASSIGN_OR_RETURN(pg_, CreateProcessGroup(env, options, dev));
  timed_ = std::make_unique<TimedProcessGroup>(pg_.get());
  if (pg_->rank() > 0 && GetLogLevel() < LogLevel::kWarning) SetLogLevel(LogLevel::kWarning);
  const std::string transport = pg_->transport();
  LogInfo("%s: %d rank%s (%s backend, from %s%s%s)", docs_.name, pg_->world_size(),
          pg_->world_size() == 1 ? "" : "s", pg_->backend(), env.source.c_str(),
          transport.empty() ? "" : "; ", transport.c_str());
  if (const char* kill = std::getenv("CCTUNE_TEST_SIGKILL_AT_STEP"); kill != nullptr && *kill) {
    const std::vector<std::string> parts = absl::StrSplit(kill, ':');
    if (parts.size() == 3) kill_where_ = parts[2];
    if (parts.size() < 2 || parts.size() > 3 || !absl::SimpleAtoi(parts[0], &kill_rank_) ||
        !absl::SimpleAtoi(parts[1], &kill_step_) || kill_step_ < 1 ||
        (kill_where_ != "step" && kill_where_ != "save")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "CCTUNE_TEST_SIGKILL_AT_STEP is \"", kill,
          "\": expected RANK:STEP or RANK:STEP:save (STEP >= 1)"));
    }
  }
  ProcessGroup* pg = timed_.get();
  hooks_.sum_over_ranks = [pg](double v) { return AllReduceScalar(*pg, v, ReduceOp::kSum); };
  return absl::OkStatus();
}

namespace {
double SteadySeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

DataParallelStrategy::~DataParallelStrategy() {
  if (!timing_ || timed_ == nullptr || timed_->world_size() == 1 || timed_->rank() != 0) return;
  const double elapsed = SteadySeconds() - timing_start_;
  LogInfo("%s: rank 0 was blocked in collectives for %.2f s of the %.2f s since training "
          "started (%.1f%%, %lld collectives): the communication that compute did not hide",
          docs_.name, timed_->blocked_seconds(), elapsed,
          elapsed > 0 ? 100.0 * timed_->blocked_seconds() / elapsed : 0.0,
          static_cast<long long>(timed_->collectives()));
}

const DataParallelHooks* DataParallelStrategy::DataParallel() const {
  if (!timing_ && timed_ != nullptr) {
    timing_ = true;
    timing_start_ = SteadySeconds();
    timed_->Reset();
  }
  if (kill_rank_ >= 0 && !kill_hook_added_ && pg_ != nullptr && pg_->rank() == kill_rank_) {
    kill_hook_added_ = true;
    std::function<absl::Status()> inner = hooks_.after_update;
    hooks_.after_update = [this, inner]() -> absl::Status {
      if (inner) CCTUNE_RETURN_IF_ERROR(inner());
      ++steps_done_;
      TestKillPoint("step");
      return absl::OkStatus();
    };
  }
  return &hooks_;
}

void DataParallelStrategy::TestKillPoint(const char* where) const {
  if (kill_rank_ < 0 || pg_ == nullptr || pg_->rank() != kill_rank_ ||
      steps_done_ != kill_step_ || kill_where_ != where) {
    return;
  }
  std::fprintf(stderr, "cctune: rank %d: CCTUNE_TEST_SIGKILL_AT_STEP: SIGKILL %s step %lld\n",
               pg_->rank(), kill_where_ == "save" ? "in the save after" : "after",
               static_cast<long long>(steps_done_));
  std::fflush(stderr);
  ::kill(::getpid(), SIGKILL);
}

}  // namespace cctune
