#include "training/interrupt.h"

#include <errno.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <string>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace cctune {
namespace {

constexpr char kSignalPayloadUrl[] = "cctune/interrupt_signal";

// Lock-free, so reading and writing it in a signal handler is safe.
std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "the handler needs a lock-free flag");
std::atomic<bool> g_installed{false};

struct sigaction g_old_term, g_old_int;

// Fixed texts, so the handler formats nothing.
constexpr char kFirstTerm[] =
    "SIGTERM received: stopping after this step to save a checkpoint (again: exit at once)\n";
constexpr char kFirstInt[] =
    "SIGINT received: stopping after this step to save a checkpoint (again: exit at once)\n";
constexpr char kSecondTerm[] =
    "SIGTERM received while stopping: exiting at once without a checkpoint (exit code 143)\n";
constexpr char kSecondInt[] =
    "SIGINT received while stopping: exiting at once without a checkpoint (exit code 130)\n";

void WriteAll(const char* text, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(STDERR_FILENO, text, size);
    if (n <= 0) return;  // nothing to do about a broken stderr here
    text += n;
    size -= static_cast<size_t>(n);
  }
}

void OnSignal(int signo) {
  const int saved_errno = errno;  // the interrupted code may be about to read errno
  const bool term = signo == SIGTERM;
  int expected = 0;
  if (g_signal.compare_exchange_strong(expected, signo)) {
    if (term) {
      WriteAll(kFirstTerm, sizeof(kFirstTerm) - 1);
    } else {
      WriteAll(kFirstInt, sizeof(kFirstInt) - 1);
    }
    errno = saved_errno;
    return;
  }
  if (term) {
    WriteAll(kSecondTerm, sizeof(kSecondTerm) - 1);
  } else {
    WriteAll(kSecondInt, sizeof(kSecondInt) - 1);
  }
  ::_exit(InterruptExitCode(signo));
}

}  // namespace

InterruptHandler::InterruptHandler() {
  CCTUNE_CHECK(!g_installed.exchange(true), "only one InterruptHandler at a time");
  g_signal.store(0);
  struct sigaction action;
  std::memset(&action, 0, sizeof(action));
  action.sa_handler = OnSignal;
  action.sa_flags = SA_RESTART;
  // Each handler runs with the other signal blocked, so two signals at once are handled one
  // after the other: the first as the request, the second as the immediate exit.
  sigemptyset(&action.sa_mask);
  sigaddset(&action.sa_mask, SIGTERM);
  sigaddset(&action.sa_mask, SIGINT);
  CCTUNE_CHECK(::sigaction(SIGTERM, &action, &g_old_term) == 0);
  CCTUNE_CHECK(::sigaction(SIGINT, &action, &g_old_int) == 0);
}

InterruptHandler::~InterruptHandler() {
  ::sigaction(SIGTERM, &g_old_term, nullptr);
  ::sigaction(SIGINT, &g_old_int, nullptr);
  g_installed.store(false);
}

int InterruptHandler::signal() const { return g_signal.load(); }

const char* SignalName(int signo) {
  switch (signo) {
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    default:
      return "signal";
  }
}

absl::Status InterruptedError(int signo, absl::string_view message) {
  absl::Status status = absl::AbortedError(message);
  status.SetPayload(kSignalPayloadUrl, absl::Cord(absl::StrCat(signo)));
  return status;
}

std::optional<int> InterruptSignal(const absl::Status& status) {
  const auto payload = status.GetPayload(kSignalPayloadUrl);  // absl::optional here
  int signo = 0;
  if (!payload.has_value() || !absl::SimpleAtoi(std::string(*payload), &signo)) {
    return std::nullopt;
  }
  return signo;
}

}  // namespace cctune
