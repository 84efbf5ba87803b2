#pragma once
// Writing a whole buffer to a descriptor (a console, a log file, a pipe), for every writer of agent/ output.

#include <cstddef>
#include <string_view>

namespace ctrun::agent {

// write(2) all of data, retrying on EINTR and short writes; errors (a closed console) are ignored.
void write_all(int fd, const char* data, std::size_t size);
inline void write_all(int fd, std::string_view text) { write_all(fd, text.data(), text.size()); }
// The same; returns 0, or the errno of the write that failed (ENOSPC: disk full).
int write_all_checked(int fd, const char* data, std::size_t size);

}  // namespace ctrun::agent
