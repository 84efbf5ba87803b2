# ctrun_version: the project version and the git revision it was built from, for `ctrun --version` and
# `ctstore --version`. The revision is re-read at every build (a custom target runs cmake/write_version.cmake,
# which rewrites the generated source only when it changed, so an unchanged tree recompiles nothing).
# A source tree without .git (a release tarball) says "unknown" unless -DCTRUN_GIT_REVISION=... is given.
set(CTRUN_GIT_REVISION "" CACHE STRING "Git revision compiled into --version (empty: ask git at build time)")
set(_ctrun_version_cpp ${PROJECT_BINARY_DIR}/generated/ctrun_version.cpp)
add_custom_target(ctrun_version_info
  COMMAND ${CMAKE_COMMAND} -DOUT=${_ctrun_version_cpp} -DVERSION=${PROJECT_VERSION}
          -DSOURCE_DIR=${PROJECT_SOURCE_DIR} -DREVISION=${CTRUN_GIT_REVISION}
          -P ${PROJECT_SOURCE_DIR}/cmake/write_version.cmake
  BYPRODUCTS ${_ctrun_version_cpp}
  COMMENT "ctrun: version ${PROJECT_VERSION} + git revision"
  VERBATIM)
add_library(ctrun_version STATIC ${_ctrun_version_cpp})
add_dependencies(ctrun_version ctrun_version_info)
set_target_properties(ctrun_version PROPERTIES POSITION_INDEPENDENT_CODE ON)
target_include_directories(ctrun_version PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>)
