// Preemption for training loops. A scheduler's SIGTERM or a Ctrl-C (SIGINT) becomes a request
// to stop at the next step boundary, so the loop can finish its step and save a checkpoint
// instead of losing every step since the last one. A second signal exits at once with
// 128 + signo (what a shell reports for a killed command), for a user who will not wait.
//
//   InterruptHandler interrupt;
//   while (...) {
//     Step();
//     if (const int sig = interrupt.signal(); sig != 0) {
//       Save();
//       return InterruptedError(sig, "...");  // RecipeMain exits with InterruptExitCode(sig)
//     }
//   }
#ifndef CCTUNE_TRAINING_INTERRUPT_H_
#define CCTUNE_TRAINING_INTERRUPT_H_

#include <optional>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace cctune {

// Installs handlers for SIGTERM and SIGINT (sigaction, SA_RESTART so that file reads and
// writes in flight are not cut short) for its lifetime, and restores the previous ones after.
// The handler only stores the signal number in a lock-free atomic and writes a fixed message
// with write(2) (async-signal-safe: no allocation, no stdio); a second signal, of either kind,
// writes its message and calls _exit(128 + signo). One handler at a time per process.
class InterruptHandler {
 public:
  InterruptHandler();
  ~InterruptHandler();
  InterruptHandler(const InterruptHandler&) = delete;
  InterruptHandler& operator=(const InterruptHandler&) = delete;

  // The first signal received since construction; 0 while none has come.
  int signal() const;
};

// "SIGTERM" or "SIGINT" (the signals handled); "signal" for others.
const char* SignalName(int signo);

// The exit code of a process stopped by `signo`, as a shell reports it: 143 for SIGTERM.
inline int InterruptExitCode(int signo) { return 128 + signo; }

// A status for a run that stopped because of `signo` (code kAborted, the signal in a payload),
// and the signal of such a status (nullopt for any other status).
absl::Status InterruptedError(int signo, absl::string_view message);
std::optional<int> InterruptSignal(const absl::Status& status);

}  // namespace cctune

#endif  // CCTUNE_TRAINING_INTERRUPT_H_
