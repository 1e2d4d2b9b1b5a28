// Status helpers: the macros Debian 12's Abseil lacks, and an always-on CHECK for internal
// invariants. Errors a user can cause travel as absl::Status; only broken invariants abort.
#ifndef CCTUNE_CORE_STATUS_H_
#define CCTUNE_CORE_STATUS_H_

#include <cstdio>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

#define CCTUNE_CONCAT_INNER_(a, b) a##b
#define CCTUNE_CONCAT_(a, b) CCTUNE_CONCAT_INNER_(a, b)

// Returns from the current function when `expr` (an absl::Status) is not OK.
#define CCTUNE_RETURN_IF_ERROR(expr)                  \
  do {                                                \
    ::absl::Status cctune_status_ = (expr);           \
    if (!cctune_status_.ok()) return cctune_status_;  \
  } while (0)

// `lhs = value of rexpr` (an absl::StatusOr<T>), or returns its error. lhs may declare.
#define CCTUNE_ASSIGN_OR_RETURN(lhs, rexpr) \
  CCTUNE_ASSIGN_OR_RETURN_IMPL_(CCTUNE_CONCAT_(cctune_statusor_, __LINE__), lhs, rexpr)

#define CCTUNE_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                                  \
  if (!statusor.ok()) return std::move(statusor).status();  \
  lhs = std::move(statusor).value()

// Internal invariant; aborts with file:line and the message. Active in every build mode.
#define CCTUNE_CHECK(cond, ...)                                                    \
  do {                                                                             \
    if (!(cond)) {                                                                 \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s %s\n", __FILE__, __LINE__,     \
                   #cond, ::absl::StrCat("" __VA_ARGS__).c_str());                 \
      std::abort();                                                                \
    }                                                                              \
  } while (0)

// Unwraps a StatusOr or aborts: for tests, tools and places where failure is a bug.
#define CCTUNE_CHECK_OK(expr)                                                     \
  do {                                                                            \
    const ::absl::Status cctune_check_status_ = ::cctune::internal::ToStatus(expr); \
    if (!cctune_check_status_.ok()) {                                             \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__,                     \
                   cctune_check_status_.ToString().c_str());                      \
      std::abort();                                                               \
    }                                                                             \
  } while (0)

namespace cctune {
namespace internal {
inline absl::Status ToStatus(const absl::Status& s) { return s; }
template <typename T>
absl::Status ToStatus(const absl::StatusOr<T>& s) {
  return s.status();
}
}  // namespace internal

// Returns the value of a StatusOr or aborts with its message.
template <typename T>
T ValueOrDie(absl::StatusOr<T> s) {
  if (!s.ok()) {
    std::fprintf(stderr, "ValueOrDie: %s\n", s.status().ToString().c_str());
    std::abort();
  }
  return std::move(s).value();
}

}  // namespace cctune

#endif  // CCTUNE_CORE_STATUS_H_
