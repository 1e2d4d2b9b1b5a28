// `cctune run --nproc_per_node N <recipe> ...`: the torchrun-style launcher. It execs
//
//   mpirun -np N*nnodes [--allow-run-as-root] [--oversubscribe] --bind-to none
//          [-x OMP_NUM_THREADS=<cores/N>] [--hostfile F --map-by ppr:N:node]
//          <this cctune binary> run <recipe> ...
//
// and every rank then reads its place from OpenMPI's variables (distributed/process_group.h).
// --allow-run-as-root when running as root (containers); --oversubscribe when N exceeds this
// host's cores; --bind-to none so each rank's OpenMP threads are not pinned to one core;
// OMP_NUM_THREADS = cores / N (at least 1) unless already set, as torchrun does. N = 1 on one
// node runs the recipe in this process, no mpirun needed.
#ifndef CCTUNE_RECIPES_LAUNCHER_H_
#define CCTUNE_RECIPES_LAUNCHER_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace cctune {

struct LaunchOptions {
  int nproc_per_node = 0;  // 0: not given (run in this process)
  int nnodes = 1;
  std::string hostfile;  // mpirun --hostfile (multi-node)
};

// Takes the launcher's flags from the front of `args` (what follows `cctune run`):
// --nproc_per_node N / --nproc-per-node N / --nproc_per_node=N, --nnodes M, --hostfile F, up
// to the recipe name. InvalidArgument naming the flag and value for N < 1, a non-number, or a
// flag without its value.
absl::StatusOr<LaunchOptions> ParseLaunchFlags(std::vector<std::string>* args);

// Whether `options` needs mpirun (more than one process).
bool NeedsLauncher(const LaunchOptions& options);

// What the launch depends on, passed in for tests.
struct LaunchHost {
  std::string mpirun;     // its path
  std::string self_exe;   // this cctune binary (/proc/self/exe)
  bool is_root = false;
  int cores = 1;
  bool omp_threads_set = false;  // OMP_NUM_THREADS already in the environment
  bool in_slurm = false;         // SLURM_JOB_ID set (mpirun then finds the nodes itself)
};

// The mpirun command line (argv) for `run_args` (the recipe and its arguments).
// InvalidArgument for nnodes > 1 without a hostfile outside Slurm.
absl::StatusOr<std::vector<std::string>> MpirunCommand(const LaunchOptions& options,
                                                       const LaunchHost& host,
                                                       const std::vector<std::string>& run_args);

// mpirun on `path_env` (PATH's value): NotFound naming the openmpi-bin package when absent.
absl::StatusOr<std::string> FindMpirun(const std::string& path_env);

// This host as LaunchHost (mpirun from $PATH).
absl::StatusOr<LaunchHost> CurrentHost();

// Replaces this process with `argv` (execv); returns only on failure, naming the program.
absl::Status Exec(const std::vector<std::string>& argv);

}  // namespace cctune

#endif  // CCTUNE_RECIPES_LAUNCHER_H_
