#pragma once
// A blocking POSIX TCP socket for the server tests: raw bytes in and out with a deadline on every read, so
// the tests exercise the server without depending on our TcpStore client.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace ctrun::store::test {

class RawSocket {
 public:
  RawSocket() = default;
  RawSocket(const std::string& ip, std::uint16_t port) { connect(ip, port); }
  ~RawSocket() { close(); }
  RawSocket(RawSocket&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  RawSocket& operator=(RawSocket&& o) noexcept {
    if (this != &o) {
      close();
      fd_ = o.fd_;
      o.fd_ = -1;
    }
    return *this;
  }

  void connect(const std::string& ip, std::uint16_t port) {
    close();
    sockaddr_storage ss{};
    socklen_t len = 0;
    if (ip.find(':') != std::string::npos) {
      auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
      a->sin6_family = AF_INET6;
      a->sin6_port = htons(port);
      if (inet_pton(AF_INET6, ip.c_str(), &a->sin6_addr) != 1) throw std::runtime_error("bad address " + ip);
      len = sizeof(sockaddr_in6);
    } else {
      auto* a = reinterpret_cast<sockaddr_in*>(&ss);
      a->sin_family = AF_INET;
      a->sin_port = htons(port);
      if (inet_pton(AF_INET, ip.c_str(), &a->sin_addr) != 1) throw std::runtime_error("bad address " + ip);
      len = sizeof(sockaddr_in);
    }
    fd_ = ::socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&ss), len) != 0)
      throw std::runtime_error(std::string("connect: ") + std::strerror(errno));
  }

  bool valid() const { return fd_ >= 0; }
  int fd() const { return fd_; }

  // Sends everything; false if the peer closed (EPIPE/ECONNRESET).
  bool send_all(std::string_view data) {
    while (!data.empty()) {
      ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n < 0) {
        if (errno == EINTR) continue;
        return false;
      }
      data.remove_prefix(static_cast<std::size_t>(n));
    }
    return true;
  }

  // Reads exactly n bytes; what arrived (shorter on EOF, reset or deadline).
  std::string recv_exact(std::size_t n, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    std::string out;
    auto deadline = std::chrono::steady_clock::now() + timeout;
    char buf[65536];
    while (out.size() < n) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0 || !wait_readable(left)) break;
      ssize_t r = ::recv(fd_, buf, std::min(sizeof buf, n - out.size()), 0);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      out.append(buf, static_cast<std::size_t>(r));
    }
    return out;
  }

  // Reads until EOF or reset; nullopt if the deadline passed first (the server did not close).
  std::optional<std::string> recv_until_close(std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    std::string out;
    auto deadline = std::chrono::steady_clock::now() + timeout;
    char buf[65536];
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0 || !wait_readable(left)) return std::nullopt;
      ssize_t r = ::recv(fd_, buf, sizeof buf, 0);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return out;
      out.append(buf, static_cast<std::size_t>(r));
    }
  }

  // True if a byte (or EOF) can be read within timeout.
  bool wait_readable(std::chrono::milliseconds timeout) const {
    pollfd p{fd_, POLLIN, 0};
    int r;
    do {
      r = ::poll(&p, 1, static_cast<int>(timeout.count()));
    } while (r < 0 && errno == EINTR);
    return r > 0;
  }

  void shutdown_write() { ::shutdown(fd_, SHUT_WR); }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// Little-endian request builders (independent of protocol.cpp, so the tests check the codec too).
inline void le64(std::string& s, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
inline void le32(std::string& s, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
inline void bytes_field(std::string& s, std::string_view b) {
  le64(s, b.size());
  s.append(b);
}
inline std::uint64_t read_le64(std::string_view s) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[static_cast<std::size_t>(i)]);
  return v;
}

}  // namespace ctrun::store::test
