#include "agent/status/log_tail.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace ctrun::agent::status {

std::string file_tail(const std::string& path, std::size_t max_bytes, int max_lines) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return "";
  struct stat st {};
  std::string text;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
    const auto size = static_cast<std::size_t>(st.st_size);
    const std::size_t from = size > max_bytes ? size - max_bytes : 0;
    text.resize(size - from);
    std::size_t got = 0;
    while (got < text.size()) {
      const ssize_t n = ::pread(fd, text.data() + got, text.size() - got, static_cast<off_t>(from + got));
      if (n <= 0) break;
      got += static_cast<std::size_t>(n);
    }
    text.resize(got);
    if (from > 0) {  // the first line is cut: it starts before what was read
      const auto nl = text.find('\n');
      text.erase(0, nl == std::string::npos ? text.size() : nl + 1);
    }
  }
  ::close(fd);
  // The last max_lines lines (a last line without '\n' counts).
  std::size_t at = text.size();
  if (at > 0 && text[at - 1] == '\n') --at;
  for (int lines = 0; at > 0; --at) {
    if (text[at - 1] == '\n' && ++lines == max_lines) break;
  }
  return text.substr(at);
}

}  // namespace ctrun::agent::status
