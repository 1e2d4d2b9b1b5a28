#include "recipes/main_guard.h"

#include <cstdio>
#include <exception>
#include <new>

namespace cctune {

int GuardedMain(const char* program, const std::function<int()>& body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr,
                 "%s: out of memory (std::bad_alloc); a size in the config is too large for "
                 "this machine\n",
                 program);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: internal error: %s (please report the config that caused it)\n",
                 program, e.what());
  } catch (...) {
    std::fprintf(stderr, "%s: internal error: unknown exception\n", program);
  }
  return 1;
}

}  // namespace cctune
