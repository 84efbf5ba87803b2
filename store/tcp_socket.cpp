#include "store/tcp_socket.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace ctrun::store {

std::string format_endpoint(const std::string& host, std::uint16_t port) {
  if (host.find(':') != std::string::npos) return fmt::format("[{}]:{}", host, port);
  return fmt::format("{}:{}", host, port);
}

int poll_timeout(Clock::time_point deadline) {
  auto left = deadline - Clock::now();
  if (left <= Clock::duration::zero()) return 0;
  auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
  return static_cast<int>(std::min<std::int64_t>(ms, 1 << 30));
}

int connect_tcp(const std::string& host, std::uint16_t port, Clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const auto service = std::to_string(port);
  int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res);
  if (rc != 0) throw StoreError(fmt::format("cannot resolve '{}': {}", host, ::gai_strerror(rc)));
  std::string error = "no address";
  int connected = -1;
  for (auto* ai = res; ai != nullptr && connected < 0; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      error = std::strerror(errno);
      continue;
    }
    int err = 0;
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      err = errno;
      if (err == EINPROGRESS) {
        pollfd p{.fd = fd, .events = POLLOUT, .revents = 0};
        int n = ::poll(&p, 1, poll_timeout(deadline));
        if (n == 1) {
          socklen_t len = sizeof(err);
          ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        } else {
          err = n == 0 ? ETIMEDOUT : errno;
        }
      }
    }
    if (err != 0) {
      error = std::strerror(err);
      ::close(fd);
      continue;
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    connected = fd;
  }
  ::freeaddrinfo(res);
  if (connected < 0) throw StoreError(error);
  return connected;
}

Duration ConnectBackoff::next() {
  constexpr Duration kMax{2000};
  std::uniform_real_distribution<double> jitter(0.5, 1.5);
  const auto sleep = std::chrono::duration_cast<Duration>(backoff_ * jitter(rng_));
  backoff_ = std::min(backoff_ * 2, kMax);
  return sleep;
}

}  // namespace ctrun::store
