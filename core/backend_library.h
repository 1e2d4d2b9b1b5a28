// Device backends built as shared libraries and opened at run time, so that a binary that runs
// on the CPU loads none of their runtimes: the CUDA backend (kernels/cuda) is
// libcctune_cuda.so, which links cudart and cuBLAS and registers its DeviceInterface and
// OpBackend from a static initialiser when opened. GetDeviceInterface opens it the first time
// a cuda device is asked for. The binaries export their symbols (-rdynamic, see
// tools/build_defs.bzl), so the library binds to their registries, allocator and counters.
#ifndef CCTUNE_CORE_BACKEND_LIBRARY_H_
#define CCTUNE_CORE_BACKEND_LIBRARY_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/device.h"

namespace cctune {

// The file name of `type`'s backend library ("libcctune_cuda.so"); empty for built-in types.
const char* BackendLibraryName(DeviceType type);

// Where LoadBackendLibrary looks, in order: $CCTUNE_CUDA_LIBRARY (a path) when set, else
// beside the running binary (/proc/self/exe's folder), its ../lib (tools/gpu_bundle.sh), and
// its Bazel runfiles (<binary>.runfiles/cctune/kernels/cuda/, or $TEST_SRCDIR/cctune/...).
std::vector<std::string> BackendLibraryCandidates(DeviceType type);

// The same search for another library of the tree: `file` ("libcctune_nccl.so") of Bazel
// package `package` ("distributed"), or $`env_var` alone when that is set (env_var may be
// null).
std::vector<std::string> LibraryCandidates(const std::string& file, const std::string& package,
                                           const char* env_var);
// dlopen (RTLD_NOW | RTLD_GLOBAL) of the first candidate that opens; Unavailable "tried P1 (no
// such file); P2 (dlerror)" otherwise. Not cached: callers open once.
absl::Status OpenLibrary(const std::vector<std::string>& candidates);

// Opens `type`'s backend library once per process (later calls return the first result).
// Unavailable naming the library, every place tried and dlerror() (e.g. a missing
// libcudart.so.13) when it cannot be opened.
absl::Status LoadBackendLibrary(DeviceType type);

}  // namespace cctune

#endif  // CCTUNE_CORE_BACKEND_LIBRARY_H_
