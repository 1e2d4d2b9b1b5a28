// Test helpers for running the recipe binaries: run a program and capture its exit code,
// stdout and stderr separately, or start it, watch what it writes, signal it and wait for it;
// locate runfiles; read the files a run wrote.
#ifndef CCTUNE_TESTS_SUBPROCESS_H_
#define CCTUNE_TESTS_SUBPROCESS_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace cctune {
namespace testing {

struct ProcessResult {
  int exit_code = -1;  // -1: could not run, or killed by a signal
  int term_signal = 0;  // the signal that killed it, 0 when it exited
  std::string out;
  std::string err;
};

struct ProcessOptions {
  std::string cwd;  // the child's working directory when not empty
  // RLIMIT_FSIZE for the child, with SIGXFSZ ignored: writing a file past this many bytes
  // fails in write(2) with EFBIG, a real write error like a full disk's ENOSPC.
  std::optional<uint64_t> file_size_limit;
};

// argv[0] is the program path. The child runs in `cwd` when it is not empty.
ProcessResult RunProcess(const std::vector<std::string>& argv, const std::string& cwd = "");
ProcessResult RunProcess(const std::vector<std::string>& argv, const ProcessOptions& options);

// A child started without waiting for it, its stdout and stderr going to files.
class Subprocess {
 public:
  // Null when fork fails.
  static std::unique_ptr<Subprocess> Start(const std::vector<std::string>& argv,
                                           const ProcessOptions& options = {});
  // Kills (SIGKILL) and reaps a child that is still there.
  ~Subprocess();
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  pid_t pid() const { return pid_; }
  // kill(pid, signo); false once the child has been reaped.
  bool Signal(int signo);
  // Whether the child is still running (not exited, not killed).
  bool Running();
  // Blocks until the child is stopped (after Signal(SIGSTOP)); false when it exited instead.
  bool WaitUntilStopped();
  // Polls `done` every few milliseconds until it returns true (true), the child ends or
  // `timeout_s` passes (false). For waiting on what the child writes, without timing guesses.
  bool WaitFor(const std::function<bool()>& done, double timeout_s);
  // Blocks until the child ends; its exit code (or signal) and outputs so far.
  ProcessResult Wait();
  // What the child has written so far.
  std::string Err() const;

 private:
  Subprocess(pid_t pid, std::string out_path, std::string err_path)
      : pid_(pid), out_path_(std::move(out_path)), err_path_(std::move(err_path)) {}
  void Reaped(int status);

  pid_t pid_;
  std::string out_path_, err_path_;
  bool reaped_ = false;
  int status_ = 0;
};

// A binary of this workspace from the test's runfiles, e.g. RunfilePath("recipes/generate").
std::string RunfilePath(const std::string& workspace_relative);

// The whole file (empty when it cannot be read): for the files a recipe run wrote.
std::string ReadFile(const std::string& path);

}  // namespace testing
}  // namespace cctune

#endif  // CCTUNE_TESTS_SUBPROCESS_H_
