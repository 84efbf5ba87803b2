#include "apps/bench/store_bench/floor_server.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

namespace ctrun::bench {

namespace {

struct Conn {
  std::string in;
};

std::uint64_t le64(const char* p) {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

}  // namespace

int serve_floor() {
  int lfd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(lfd, 4096) != 0 ||
      ::getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    std::perror("floor server: listen");
    return 1;
  }
  std::printf("floor listening on 127.0.0.1:%u\n", ntohs(a.sin_port));
  std::fflush(stdout);
  int ep = ::epoll_create1(EPOLL_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.fd = lfd;
  ::epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
  std::unordered_map<int, Conn> conns;
  std::unordered_map<std::string, std::int64_t> counters;
  std::vector<epoll_event> events(256);
  char buf[65536];
  std::string out;
  for (;;) {
    int n = ::epoll_wait(ep, events.data(), static_cast<int>(events.size()), -1);
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == lfd) {
        int c = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
        if (c < 0) continue;
        ::setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        epoll_event cev{};
        cev.events = EPOLLIN;
        cev.data.fd = c;
        ::epoll_ctl(ep, EPOLL_CTL_ADD, c, &cev);
        conns[c];
        continue;
      }
      auto& c = conns[fd];
      ssize_t r = ::recv(fd, buf, sizeof buf, 0);
      if (r <= 0) {
        ::close(fd);  // also leaves the epoll set
        conns.erase(fd);
        continue;
      }
      c.in.append(buf, static_cast<std::size_t>(r));
      out.clear();
      std::size_t off = 0;
      bool bad = false;
      while (c.in.size() - off >= 9) {
        if (c.in[off] != 3) {
          bad = true;
          break;
        }
        const std::uint64_t klen = le64(c.in.data() + off + 1);
        if (klen > (1u << 16)) {
          bad = true;
          break;
        }
        if (c.in.size() - off < 9 + klen + 8) break;
        std::string key(c.in.data() + off + 9, klen);
        const auto delta = static_cast<std::int64_t>(le64(c.in.data() + off + 9 + klen));
        const std::int64_t v = counters[key] += delta;
        out.append(reinterpret_cast<const char*>(&v), 8);
        off += 9 + klen + 8;
      }
      c.in.erase(0, off);
      if (!out.empty()) ::send(fd, out.data(), out.size(), MSG_NOSIGNAL);  // 8 bytes: fits the socket buffer
      if (bad) {
        ::close(fd);
        conns.erase(fd);
      }
    }
  }
}

}  // namespace ctrun::bench
