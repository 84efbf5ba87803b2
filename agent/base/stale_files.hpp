#pragma once
// What a ctrun killed with SIGKILL leaves behind in /dev/shm (an attempt's progress region, its exit-record file):
// files named <prefix><agent pid>-<...>, which the next ctrun removes once that pid is gone.

#include <string>
#include <string_view>
#include <vector>

namespace ctrun::agent {

// Removes the files of `dir` named <prefix><pid>-... whose pid is not alive (nor this process). A pid reused by an
// unrelated process keeps its files until that process ends (harmless: a few KiB). Returns the paths removed.
std::vector<std::string> sweep_files_of_dead_agents(const std::string& dir, std::string_view prefix);

}  // namespace ctrun::agent
