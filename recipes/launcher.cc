#include "recipes/launcher.h"

#include <unistd.h>

#include <climits>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace cctune {
namespace {

// "--flag value" or "--flag=value" at args[*i] for any of `names`; advances *i past it.
bool TakeFlag(const std::vector<std::string>& args, size_t* i,
              std::initializer_list<const char*> names, std::string* value, bool* missing) {
  for (const char* name : names) {
    const std::string& a = args[*i];
    if (a == name) {
      if (*i + 1 >= args.size()) {
        *missing = true;
        *value = name;
        return true;
      }
      *value = args[*i + 1];
      *i += 2;
      return true;
    }
    const std::string prefix = absl::StrCat(name, "=");
    if (absl::StartsWith(a, prefix)) {
      *value = a.substr(prefix.size());
      *i += 1;
      return true;
    }
  }
  return false;
}

absl::StatusOr<int> Positive(const char* flag, const std::string& value) {
  int n = 0;
  if (!absl::SimpleAtoi(value, &n) || n < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("cctune run: ", flag, " must be a whole number of at least 1, got '", value,
                     "'"));
  }
  return n;
}

}  // namespace

absl::StatusOr<LaunchOptions> ParseLaunchFlags(std::vector<std::string>* args) {
  LaunchOptions options;
  size_t i = 0;
  while (i < args->size() && absl::StartsWith((*args)[i], "--")) {
    std::string value;
    bool missing = false;
    if (TakeFlag(*args, &i, {"--nproc_per_node", "--nproc-per-node"}, &value, &missing)) {
      if (missing) return absl::InvalidArgumentError("cctune run: --nproc_per_node needs a value");
      auto n = Positive("--nproc_per_node", value);
      if (!n.ok()) return n.status();
      options.nproc_per_node = *n;
    } else if (TakeFlag(*args, &i, {"--nnodes"}, &value, &missing)) {
      if (missing) return absl::InvalidArgumentError("cctune run: --nnodes needs a value");
      auto n = Positive("--nnodes", value);
      if (!n.ok()) return n.status();
      options.nnodes = *n;
    } else if (TakeFlag(*args, &i, {"--hostfile"}, &value, &missing)) {
      if (missing) return absl::InvalidArgumentError("cctune run: --hostfile needs a file");
      options.hostfile = value;
    } else {
      break;  // not a launcher flag: the recipe's (or --help)
    }
  }
  args->erase(args->begin(), args->begin() + i);
  if (options.nproc_per_node == 0 && (options.nnodes > 1 || !options.hostfile.empty())) {
    return absl::InvalidArgumentError(
        "cctune run: --nnodes / --hostfile need --nproc_per_node N (processes per node)");
  }
  return options;
}

bool NeedsLauncher(const LaunchOptions& options) {
  return options.nproc_per_node * options.nnodes > 1 || !options.hostfile.empty();
}

absl::StatusOr<std::vector<std::string>> MpirunCommand(const LaunchOptions& options,
                                                       const LaunchHost& host,
                                                       const std::vector<std::string>& run_args) {
  const int per_node = std::max(1, options.nproc_per_node);
  if (options.nnodes > 1 && options.hostfile.empty() && !host.in_slurm) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cctune run: --nnodes ", options.nnodes,
        " needs --hostfile <file> (one line per node: 'host slots=", per_node,
        "') or a Slurm allocation (salloc / sbatch); see docs/distributed.md"));
  }
  std::vector<std::string> argv = {host.mpirun, "-np",
                                   std::to_string(per_node * options.nnodes)};
  if (host.is_root) argv.push_back("--allow-run-as-root");
  if (per_node > host.cores) argv.push_back("--oversubscribe");
  argv.insert(argv.end(), {"--bind-to", "none"});
  if (!options.hostfile.empty()) argv.insert(argv.end(), {"--hostfile", options.hostfile});
  if (!options.hostfile.empty() || options.nnodes > 1) {
    argv.insert(argv.end(), {"--map-by", absl::StrCat("ppr:", per_node, ":node")});
  }
  if (!host.omp_threads_set) {
    argv.insert(argv.end(),
                {"-x", absl::StrCat("OMP_NUM_THREADS=", std::max(1, host.cores / per_node))});
  }
  argv.push_back(host.self_exe);
  argv.push_back("run");
  argv.insert(argv.end(), run_args.begin(), run_args.end());
  return argv;
}

absl::StatusOr<std::string> FindMpirun(const std::string& path_env) {
  for (absl::string_view dir : absl::StrSplit(path_env, ':', absl::SkipEmpty())) {
    const std::string candidate = absl::StrCat(dir, "/mpirun");
    if (::access(candidate.c_str(), X_OK) != 0) continue;
    // The folder without links: OpenMPI takes the folder above an absolute mpirun path as its
    // --prefix, and /bin/mpirun (where /bin links to /usr/bin) would give "/", which it
    // refuses ("a prefix ... that only contained slashes").
    char real[PATH_MAX];
    const std::string folder(dir);
    if (::realpath(folder.c_str(), real) != nullptr) return absl::StrCat(real, "/mpirun");
    return candidate;
  }
  return absl::NotFoundError(
      "cctune run --nproc_per_node: mpirun is not on PATH; install OpenMPI's launcher (Debian "
      "/ Ubuntu: apt-get install openmpi-bin; tools/setup.sh does it), or start the ranks "
      "yourself with srun (docs/distributed.md)");
}

absl::StatusOr<LaunchHost> CurrentHost() {
  LaunchHost host;
  const char* path = std::getenv("PATH");
  auto mpirun = FindMpirun(path != nullptr ? path : "");
  if (!mpirun.ok()) return mpirun.status();
  host.mpirun = *mpirun;
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) {
    return absl::InternalError(
        absl::StrCat("cctune run: cannot find this program (/proc/self/exe): ", std::strerror(errno)));
  }
  host.self_exe.assign(buf, static_cast<size_t>(n));
  host.is_root = ::geteuid() == 0;
  host.cores = std::max(1u, std::thread::hardware_concurrency());
  host.omp_threads_set = std::getenv("OMP_NUM_THREADS") != nullptr;
  host.in_slurm = std::getenv("SLURM_JOB_ID") != nullptr;
  return host;
}

absl::Status Exec(const std::vector<std::string>& argv) {
  std::vector<char*> cargv;
  for (const std::string& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  ::execv(cargv[0], cargv.data());
  return absl::UnavailableError(
      absl::StrCat("cctune run: cannot start ", argv[0], ": ", std::strerror(errno)));
}

}  // namespace cctune
