#pragma once
// The version of this build: the project's VERSION and the git revision it was built from (cmake/version.cmake
// generates the definitions at every build, so the revision is never stale).

#include <string>
#include <string_view>

namespace ctrun {

std::string_view version();       // "0.1.0"
std::string_view git_revision();  // "a099afb1c2d3" ("-dirty" with uncommitted changes), or "unknown"
// "<program> 0.1.0 (git a099afb1c2d3)": what `ctrun --version` and `ctstore --version` print.
std::string version_line(std::string_view program);

}  // namespace ctrun
