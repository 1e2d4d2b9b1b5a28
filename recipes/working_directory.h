// `bazel run` starts binaries inside their runfiles tree; users expect relative paths (configs,
// checkpoint directories, cp destinations) to mean the directory they ran bazel from.
#ifndef CCTUNE_RECIPES_WORKING_DIRECTORY_H_
#define CCTUNE_RECIPES_WORKING_DIRECTORY_H_

namespace cctune {

// Changes into $BUILD_WORKING_DIRECTORY when bazel run set it; does nothing otherwise.
void ChdirToUserWorkingDirectory();

}  // namespace cctune

#endif  // CCTUNE_RECIPES_WORKING_DIRECTORY_H_
