#include "apps/bench/store_bench/connection_storm.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

#include "store/protocol.hpp"

namespace ctrun::bench {

ConnectionSet::~ConnectionSet() {
  for (int fd : fds_)
    if (fd >= 0) ::close(fd);
}

namespace {

struct Conn {
  int fd = -1;
  bool sent = false;
  std::size_t got = 0;  // reply bytes received (an i64)
};

int open_connection(std::uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error(fmt::format("socket: {} (raise ulimit -n)", std::strerror(errno)));
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 && errno != EINPROGRESS) {
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

StormResult run_storm(std::uint16_t port, int connections, std::chrono::seconds timeout) {
  // The request comes from the one wire codec: legacy ADD "init/" 1, as torch 1.13 clients send it.
  std::string request;
  store::protocol::encode_request(store::protocol::Dialect::kLegacy,
                                  {.command = store::protocol::Command::kAdd, .keys = {"init/"}, .integer = 1},
                                  request);
  int ep = ::epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0) throw std::runtime_error("epoll_create1 failed");
  std::vector<Conn> conns(static_cast<std::size_t>(connections));
  StormResult result;
  auto arm = [&](std::size_t i) {
    for (;;) {
      conns[i] = Conn{.fd = open_connection(port)};
      if (conns[i].fd >= 0) break;
      ++result.reconnects;
    }
    epoll_event ev{.events = EPOLLOUT | EPOLLIN, .data = {.u64 = i}};
    ::epoll_ctl(ep, EPOLL_CTL_ADD, conns[i].fd, &ev);
  };
  auto retry = [&](std::size_t i) {
    ::epoll_ctl(ep, EPOLL_CTL_DEL, conns[i].fd, nullptr);
    ::close(conns[i].fd);
    ++result.reconnects;
    arm(i);
  };

  auto t0 = std::chrono::steady_clock::now();
  auto deadline = t0 + timeout;
  for (std::size_t i = 0; i < conns.size(); ++i) arm(i);
  int done = 0;
  std::vector<epoll_event> events(1024);
  while (done < connections) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::close(ep);
      for (auto& c : conns) ::close(c.fd);
      throw std::runtime_error(
          fmt::format("storm: only {} of {} replies within {} s", done, connections, timeout.count()));
    }
    int n = ::epoll_wait(ep, events.data(), static_cast<int>(events.size()), 100);
    for (int e = 0; e < n; ++e) {
      auto i = static_cast<std::size_t>(events[e].data.u64);
      auto& c = conns[i];
      if (!c.sent && (events[e].events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) {
        int err = 0;
        socklen_t len = sizeof(err);
        ::getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &err, &len);
        // The request is a few bytes: a fresh socket's send buffer always takes it whole.
        if (err != 0 ||
            ::send(c.fd, request.data(), request.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(request.size())) {
          retry(i);
          continue;
        }
        c.sent = true;
        epoll_event ev{.events = EPOLLIN, .data = {.u64 = i}};
        ::epoll_ctl(ep, EPOLL_CTL_MOD, c.fd, &ev);
        continue;
      }
      if (c.sent && (events[e].events & (EPOLLIN | EPOLLERR | EPOLLHUP))) {
        char buf[16];
        ssize_t r = ::recv(c.fd, buf, sizeof(buf), 0);
        if (r > 0) {
          c.got += static_cast<std::size_t>(r);
          if (c.got >= 8) {
            ++done;
            // Keep the connection open (real clients hold theirs for the whole job) but stop watching it.
            ::epoll_ctl(ep, EPOLL_CTL_DEL, c.fd, nullptr);
          }
        } else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
          retry(i);  // reset before the reply: try again, as a real client's connect loop would
        }
      }
    }
  }
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ::close(ep);
  for (auto& c : conns) result.connections.fds().push_back(c.fd);
  return result;
}

}  // namespace ctrun::bench
