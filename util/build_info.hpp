// util/build_info.hpp — what this binary was built from: the project's version (CMakeLists.txt
// project()) and the git commit of the source tree at build time ("<12 hex>", "-dirty" when the
// tree had uncommitted changes, "unknown" outside a git checkout). Written at every build by
// cmake/build_info.cmake (target dd_build_info); `dd-node --version` prints them and every node
// exposes them as the dd_build_info metric.
#pragma once

namespace dd::util {

const char* build_version();
const char* build_commit();

}  // namespace dd::util
