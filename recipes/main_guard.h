// The last line of defence of the recipe binaries' main(): an exception that escapes a recipe
// (std::bad_alloc for a size no check caught, std::length_error from a container) becomes an
// error message on stderr and exit code 1 instead of std::terminate's abort and core dump.
// Errors a user can cause are Status values with their own messages; reaching this handler
// means a check is missing, and the message says so.
#ifndef CCTUNE_RECIPES_MAIN_GUARD_H_
#define CCTUNE_RECIPES_MAIN_GUARD_H_

#include <functional>

namespace cctune {

// Runs `body` and returns its exit code, or 1 after printing "<program>: internal error: ..."
// when it throws.
int GuardedMain(const char* program, const std::function<int()>& body);

}  // namespace cctune

#endif  // CCTUNE_RECIPES_MAIN_GUARD_H_
