#include "tests/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"

namespace cctune {
namespace testing {

ProcessResult RunProcess(const std::vector<std::string>& argv, const std::string& cwd) {
  ProcessOptions options;
  options.cwd = cwd;
  return RunProcess(argv, options);
}

ProcessResult RunProcess(const std::vector<std::string>& argv, const ProcessOptions& options) {
  std::unique_ptr<Subprocess> p = Subprocess::Start(argv, options);
  if (p == nullptr) return ProcessResult();
  return p->Wait();
}

std::unique_ptr<Subprocess> Subprocess::Start(const std::vector<std::string>& argv,
                                              const ProcessOptions& options) {
  static int counter = 0;
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string base =
      absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/proc_", getpid(), "_", counter++);
  std::string out_path = base + ".out", err_path = base + ".err";
  // Built before fork: the child only makes system calls.
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return nullptr;
  if (pid == 0) {
    const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (out < 0 || err < 0) _exit(127);
    dup2(out, 1);
    dup2(err, 2);
    if (!options.cwd.empty() && chdir(options.cwd.c_str()) != 0) _exit(127);
    if (options.file_size_limit.has_value()) {
      signal(SIGXFSZ, SIG_IGN);  // an ignored disposition survives exec
      struct rlimit limit;
      if (getrlimit(RLIMIT_FSIZE, &limit) != 0) _exit(127);
      limit.rlim_cur = *options.file_size_limit;
      if (setrlimit(RLIMIT_FSIZE, &limit) != 0) _exit(127);
    }
    execv(args[0], args.data());
    _exit(127);
  }
  return std::unique_ptr<Subprocess>(new Subprocess(pid, out_path, err_path));
}

Subprocess::~Subprocess() {
  if (reaped_) return;
  kill(pid_, SIGKILL);
  int status = 0;
  waitpid(pid_, &status, 0);
}

void Subprocess::Reaped(int status) {
  reaped_ = true;
  status_ = status;
}

bool Subprocess::Signal(int signo) { return !reaped_ && kill(pid_, signo) == 0; }

bool Subprocess::Running() {
  if (reaped_) return false;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) == pid_) {
    Reaped(status);
    return false;
  }
  return true;
}

bool Subprocess::WaitUntilStopped() {
  if (reaped_) return false;
  int status = 0;
  if (waitpid(pid_, &status, WUNTRACED) != pid_) return false;
  if (WIFSTOPPED(status)) return true;
  Reaped(status);
  return false;
}

bool Subprocess::WaitFor(const std::function<bool()>& done, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    if (!Running()) return done();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return false;
}

ProcessResult Subprocess::Wait() {
  if (!reaped_) {
    int status = 0;
    if (waitpid(pid_, &status, 0) == pid_) Reaped(status);
  }
  ProcessResult result;
  if (reaped_ && WIFEXITED(status_)) result.exit_code = WEXITSTATUS(status_);
  if (reaped_ && WIFSIGNALED(status_)) result.term_signal = WTERMSIG(status_);
  result.out = ReadFile(out_path_);
  result.err = ReadFile(err_path_);
  return result;
}

std::string Subprocess::Err() const { return ReadFile(err_path_); }

std::string RunfilePath(const std::string& workspace_relative) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  return absl::StrCat(srcdir != nullptr ? srcdir : ".", "/cctune/", workspace_relative);
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace testing
}  // namespace cctune
