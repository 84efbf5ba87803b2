#include "agent/hang/status_server.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <thread>

namespace ctrun::agent::hang {
namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t kMaxRequest = 4096;
constexpr auto kConnectionDeadline = std::chrono::seconds(2);

[[noreturn]] void fail(const std::string& what) {
  throw std::runtime_error("status server: " + what + ": " + std::strerror(errno));
}

sockaddr_in address_of(const std::string& host, int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  if (::inet_pton(AF_INET, host.c_str(), &a.sin_addr) != 1) {
    errno = EINVAL;
    fail("'" + host + "' is not an IPv4 address");
  }
  return a;
}

int ms_left(Clock::time_point deadline) {
  return static_cast<int>(
      std::max<long long>(0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count()));
}

// Waits for `events` on fd until the deadline; false on timeout or error.
bool wait_for(int fd, short events, Clock::time_point deadline) {
  pollfd p{fd, events, 0};
  for (;;) {
    const int n = ::poll(&p, 1, ms_left(deadline));
    if (n > 0) return true;
    if (n == 0 || errno != EINTR) return false;
  }
}

bool send_all(int fd, const std::string& data, Clock::time_point deadline) {
  std::size_t sent = 0;
  while (sent < data.size()) {
    if (!wait_for(fd, POLLOUT, deadline)) return false;
    const ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n <= 0) return false;
    sent += static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace

struct StatusServer::State {
  int listen_fd = -1;
  int port = 0;
  std::atomic<bool> stop{false};
  std::mutex mutex;
  std::string text = "no snapshot yet\n";
  std::string json = "{}";
  std::thread thread;

  void serve(int fd) {
    const auto deadline = Clock::now() + kConnectionDeadline;
    std::string request;
    char buf[1024];
    while (request.find("\r\n\r\n") == std::string::npos && request.find("\n\n") == std::string::npos) {
      if (request.size() > kMaxRequest || !wait_for(fd, POLLIN, deadline)) return;
      const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (n <= 0) return;
      request.append(buf, static_cast<std::size_t>(n));
    }
    std::string status = "200 OK", type = "text/plain; charset=utf-8", body;
    if (request.starts_with("GET /status.json ")) {
      type = "application/json";
      std::lock_guard lock(mutex);
      body = json + "\n";
    } else if (request.starts_with("GET / ")) {
      std::lock_guard lock(mutex);
      body = text;
    } else {
      status = "404 Not Found";
      body = "ctrun status: GET / (text) or GET /status.json\n";
    }
    send_all(fd,
             "HTTP/1.0 " + status + "\r\nContent-Type: " + type + "\r\nContent-Length: " + std::to_string(body.size()) +
                 "\r\nConnection: close\r\n\r\n" + body,
             deadline);
  }

  void loop() {
    while (!stop.load()) {
      pollfd p{listen_fd, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) continue;
      serve(fd);
      ::close(fd);
    }
  }
};

StatusServer::StatusServer(const std::string& host, int port) : state_(std::make_shared<State>()) {
  const sockaddr_in a = address_of(host, port);
  state_->listen_fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (state_->listen_fd < 0) fail("socket");
  const int one = 1;
  ::setsockopt(state_->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (::bind(state_->listen_fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0 ||
      ::listen(state_->listen_fd, 16) != 0) {
    const int e = errno;
    ::close(state_->listen_fd);
    errno = e;
    fail("cannot listen on " + host + ":" + std::to_string(port));
  }
  sockaddr_in bound{};
  socklen_t len = sizeof bound;
  ::getsockname(state_->listen_fd, reinterpret_cast<sockaddr*>(&bound), &len);
  state_->port = ntohs(bound.sin_port);
  state_->thread = std::thread([s = state_] { s->loop(); });
}

StatusServer::~StatusServer() {
  state_->stop = true;
  if (state_->thread.joinable()) state_->thread.join();
  ::close(state_->listen_fd);
}

int StatusServer::port() const { return state_->port; }

void StatusServer::publish(std::string text, std::string json) {
  std::lock_guard lock(state_->mutex);
  state_->text = std::move(text);
  state_->json = std::move(json);
}

std::string http_get(const std::string& host, int port, const std::string& path, int timeout_ms) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  const sockaddr_in a = address_of(host, port);
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) fail("socket");
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  const std::string where = host + ":" + std::to_string(port);
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0 && errno != EINPROGRESS) {
    fail("cannot connect to " + where + " (is the job running? its agent writes the port into the log dir)");
  }
  int err = 0;
  socklen_t len = sizeof err;
  if (!wait_for(fd, POLLOUT, deadline) || ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) {
    errno = err ? err : ETIMEDOUT;
    fail("cannot connect to " + where);
  }
  if (!send_all(fd, "GET " + path + " HTTP/1.0\r\nHost: " + host + "\r\n\r\n", deadline)) fail("send to " + where);
  std::string reply;
  char buf[4096];
  for (;;) {
    if (!wait_for(fd, POLLIN, deadline)) {
      errno = ETIMEDOUT;
      fail("no reply from " + where);
    }
    const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n < 0) fail("recv from " + where);
    if (n == 0) break;
    reply.append(buf, static_cast<std::size_t>(n));
  }
  const auto body = reply.find("\r\n\r\n");
  if (!reply.starts_with("HTTP/1.0 200") || body == std::string::npos) {
    errno = EPROTO;
    fail(where + " answered: " + reply.substr(0, reply.find('\r')));
  }
  return reply.substr(body + 4);
}

}  // namespace ctrun::agent::hang
