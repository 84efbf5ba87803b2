#pragma once
// The end of a worker's log file for the job's page (GET /logs): read when asked, from the end, bounded.

#include <cstddef>
#include <string>

namespace ctrun::agent::status {

// The last `max_lines` whole lines of `path` within its last `max_bytes` (a line cut by that bound is left out);
// "" when the file is empty or cannot be read.
std::string file_tail(const std::string& path, std::size_t max_bytes, int max_lines);

}  // namespace ctrun::agent::status
