#include "agent/logs/write_all.hpp"

#include <unistd.h>

#include <cerrno>

namespace ctrun::agent {

int write_all_checked(int fd, const char* data, std::size_t size) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return EIO;
    data += n;
    size -= static_cast<std::size_t>(n);
  }
  return 0;
}

void write_all(int fd, const char* data, std::size_t size) { (void)write_all_checked(fd, data, size); }

}  // namespace ctrun::agent
