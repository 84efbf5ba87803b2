#include "tcp_floor.hpp"

#include "comm/config.hpp"
#include "comm/options.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <vector>

namespace ctrun::bench {
namespace {

// comm's own socket options: TCP_NODELAY, and the buffer size comm resolves (0: kernel autotuning).
void tune(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  const std::size_t bytes = comm::Config::resolve(comm::ProcessGroupOptions{}).tcp_buffer_bytes;
  if (bytes == 0) return;
  const int buf = static_cast<int>(std::min<std::size_t>(bytes, std::size_t{1} << 30));
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
}

void send_all(int fd, const char* p, std::size_t n) {
  while (n > 0) {
    const ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k <= 0) return;
    p += k;
    n -= static_cast<std::size_t>(k);
  }
}

[[noreturn]] void fail(const char* what) { throw std::runtime_error(std::string("tcp ring: ") + what + ": " + std::strerror(errno)); }

}  // namespace

TcpRing::TcpRing(comm::ProcessGroup& pg, const std::string& host) {
  const int n = pg.size();
  if (n < 2) return;
  const int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (lfd < 0) fail("socket");
  tune(lfd);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  inet_pton(AF_INET, host.c_str(), &a.sin_addr);
  socklen_t len = sizeof a;
  if (bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(lfd, 4) != 0 ||
      getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    fail("listen");
  // (address, port) of every rank's listener.
  std::vector<std::int64_t> ends(2 * static_cast<std::size_t>(n));
  std::vector<std::int64_t> mine{static_cast<std::int64_t>(a.sin_addr.s_addr), ntohs(a.sin_port)};
  pg.all_gather_into(ends, mine);
  to_right_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  tune(to_right_);
  sockaddr_in r = a;
  const auto right = 2 * static_cast<std::size_t>((pg.rank() + 1) % n);
  r.sin_addr.s_addr = static_cast<in_addr_t>(ends[right]);
  r.sin_port = htons(static_cast<std::uint16_t>(ends[right + 1]));
  if (connect(to_right_, reinterpret_cast<sockaddr*>(&r), sizeof r) != 0) fail("connect");
  from_left_ = accept(lfd, nullptr, nullptr);
  if (from_left_ < 0) fail("accept");
  ::close(lfd);
  pg.barrier();
}

TcpRing::~TcpRing() {
  if (to_right_ >= 0) ::close(to_right_);
  if (from_left_ >= 0) ::close(from_left_);
}

std::size_t TcpRing::ring_bytes(const std::string& op, int n, std::size_t bytes) {
  if (n < 2) return 0;
  const auto s = static_cast<double>(bytes);
  if (op == "all_reduce") return static_cast<std::size_t>(2.0 * (n - 1) / n * s);
  if (op == "all_gather" || op == "reduce_scatter") return static_cast<std::size_t>(1.0 * (n - 1) / n * s);
  if (op == "broadcast") return bytes;
  return 0;
}

double TcpRing::time_us(comm::ProcessGroup& pg, std::size_t bytes, int reps) {
  if (to_right_ < 0 || bytes == 0) return 0;
  std::vector<char> out(bytes, 1);
  std::vector<char> in(bytes);
  double best = 1e300;
  for (int i = 0; i < reps; ++i) {
    pg.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    std::thread sender([&] {
      for (std::size_t off = 0; off < bytes;) {
        const ssize_t k = ::send(to_right_, out.data() + off, bytes - off, MSG_NOSIGNAL);
        if (k <= 0) return;
        off += static_cast<std::size_t>(k);
      }
    });
    for (std::size_t off = 0; off < bytes;) {
      const ssize_t k = ::recv(from_left_, in.data() + off, bytes - off, 0);
      if (k <= 0) break;
      off += static_cast<std::size_t>(k);
    }
    sender.join();
    best = std::min(best, std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  std::vector<double> slowest{best};
  pg.all_reduce(slowest, comm::ReduceOp::kMax);
  return slowest[0];
}

double TcpRing::chain_time_us(comm::ProcessGroup& pg, std::size_t bytes, int reps) {
  if (to_right_ < 0 || bytes == 0) return 0;
  const int n = pg.size();
  const int me = pg.rank();
  std::vector<char> data(bytes, 1);
  // Forwarding unit: what arrived, at most comm's pipelining chunk over tcp.
  const std::size_t unit = comm::Config::resolve(comm::ProcessGroupOptions{}).chunk_bytes_for("tcp");
  double best = 1e300;
  for (int i = 0; i < reps; ++i) {
    pg.barrier();
    const auto t0 = std::chrono::steady_clock::now();
    if (me == 0) {
      send_all(to_right_, data.data(), bytes);
    } else {
      for (std::size_t off = 0; off < bytes;) {
        const ssize_t k = ::recv(from_left_, data.data() + off, std::min(unit, bytes - off), 0);
        if (k <= 0) break;
        if (me < n - 1) send_all(to_right_, data.data() + off, static_cast<std::size_t>(k));
        off += static_cast<std::size_t>(k);
      }
    }
    best = std::min(best, std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  std::vector<double> slowest{best};
  pg.all_reduce(slowest, comm::ReduceOp::kMax);
  return slowest[0];
}

double TcpRing::floor_us(comm::ProcessGroup& pg, const std::string& op, std::size_t bytes, int reps) {
  if (op == "broadcast") return chain_time_us(pg, bytes, reps);
  return time_us(pg, ring_bytes(op, pg.size(), bytes), reps);
}

}  // namespace ctrun::bench
