#include "apps/bench/store_bench/event_load.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "store/protocol.hpp"

namespace ctrun::bench {
namespace {

namespace proto = store::protocol;

constexpr std::size_t kValueBytes = 32;  // as the thread-per-connection clients' value

std::string encode(proto::Command c, std::vector<std::string> keys, std::vector<std::string> values = {},
                   std::int64_t integer = 0) {
  proto::Request r;
  r.command = c;
  r.keys = std::move(keys);
  r.values = std::move(values);
  r.integer = integer;
  std::string out;
  proto::encode_request(proto::Dialect::kLegacy, r, out);
  return out;
}

// One round trip of an operation: the bytes to send (possibly a reply-less request followed by one with a
// reply, as a client's SET then WAIT) and the shape of the single reply that ends it.
struct Step {
  enum class Reply { kI64, kU8, kBytes };
  std::string request;
  Reply reply;
};

struct Conn {
  int fd = -1;
  std::vector<Step> steps;  // one operation; the connection cycles through them
  std::size_t step = 0;
  std::array<std::uint8_t, 64> buf{};  // the reply being received (every reply here is at most 8 + 32 bytes)
  std::size_t got = 0;
  std::int64_t last_add = 0;
  bool have_add = false;
  std::string value;
};

int connect_loopback(std::uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error(fmt::format("socket: {}", std::strerror(errno)));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    int e = errno;
    ::close(fd);
    throw std::runtime_error(fmt::format("connect to 127.0.0.1:{}: {}", port, std::strerror(e)));
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

void send_all_blocking(int fd, const std::string& bytes) {
  std::size_t off = 0;
  while (off < bytes.size()) {
    ssize_t n = ::send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw std::runtime_error(fmt::format("send: {}", std::strerror(errno)));
    off += static_cast<std::size_t>(n);
  }
}

// Sends the current step's request. The requests are < 100 bytes and the connection has nothing else in
// flight, so the socket buffer always takes them whole.
void send_step(Conn& c) {
  const auto& req = c.steps[c.step].request;
  ssize_t n = ::send(c.fd, req.data(), req.size(), MSG_NOSIGNAL);
  if (n != static_cast<ssize_t>(req.size()))
    throw std::runtime_error(fmt::format("short send ({} of {} bytes): {}", n, req.size(), std::strerror(errno)));
}

// Reads what arrived; returns true when the current step's reply is complete (and checked).
bool receive(Conn& c) {
  ssize_t n = ::recv(c.fd, c.buf.data() + c.got, c.buf.size() - c.got, 0);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return false;
    throw std::runtime_error(fmt::format("recv: {}", std::strerror(errno)));
  }
  if (n == 0) throw std::runtime_error("the server closed a benchmark connection");
  c.got += static_cast<std::size_t>(n);
  const auto& s = c.steps[c.step];
  std::size_t want = 0;
  switch (s.reply) {
    case Step::Reply::kI64:
      want = 8;
      break;
    case Step::Reply::kU8:
      want = 1;
      break;
    case Step::Reply::kBytes:
      if (c.got < 8) return false;
      want = 8 + proto::get_u64(c.buf.data());
      if (want > c.buf.size()) throw std::runtime_error(fmt::format("GET reply of {} bytes, expected 40", want));
      break;
  }
  if (c.got < want) return false;
  if (c.got > want) throw std::runtime_error("reply longer than expected (bytes out of step)");
  switch (s.reply) {
    case Step::Reply::kI64: {
      auto v = proto::get_i64(c.buf.data());
      if (c.have_add && v != c.last_add + 1)
        throw std::runtime_error(fmt::format("ADD replied {} after {}", v, c.last_add));
      c.last_add = v;
      c.have_add = true;
      break;
    }
    case Step::Reply::kU8:
      if (c.buf[0] != 0) throw std::runtime_error(fmt::format("CHECK/WAIT replied {}, expected 0", c.buf[0]));
      break;
    case Step::Reply::kBytes:
      if (std::memcmp(c.buf.data() + 8, c.value.data(), c.value.size()) != 0 || want != 8 + c.value.size())
        throw std::runtime_error("GET returned a different value");
      break;
  }
  c.got = 0;
  return true;
}

}  // namespace

RoundTripResult measure_event_driven(std::uint16_t port, const std::function<double()>& server_cpu_seconds, Op op,
                                     int connections, int threads, std::chrono::milliseconds warmup,
                                     std::chrono::milliseconds duration) {
  threads = std::max(1, std::min(threads, connections));
  std::vector<Conn> conns(static_cast<std::size_t>(connections));
  struct Closer {
    std::vector<Conn>& v;
    ~Closer() {
      for (auto& c : v)
        if (c.fd >= 0) ::close(c.fd);
    }
  } closer{conns};

  // Keys as our TcpStore sends them ("/" + key), in their own namespace so that the thread-per-connection
  // runs on the same server (whose SET+GET leaves non-numeric values) cannot disturb the ADD check.
  for (int i = 0; i < connections; ++i) {
    auto& c = conns[static_cast<std::size_t>(i)];
    c.fd = connect_loopback(port);
    const std::string key = fmt::format("/bench/ev/{}", i);
    c.value = std::string(kValueBytes, 'v');
    switch (op) {
      case Op::kAdd:
        c.steps.push_back({encode(proto::Command::kAdd, {key}, {}, 1), Step::Reply::kI64});
        break;
      case Op::kSetGet:
        // What TcpStore::set + get send: SET (no reply), then WAIT [key] (00) and GET key (the value).
        c.steps.push_back(
            {encode(proto::Command::kSet, {key}, {c.value}) + encode(proto::Command::kWait, {key}), Step::Reply::kU8});
        c.steps.push_back({encode(proto::Command::kGet, {key}), Step::Reply::kBytes});
        break;
      case Op::kCheck:
        send_all_blocking(c.fd, encode(proto::Command::kSet, {key}, {c.value}));  // no reply; precedes the CHECKs
        c.steps.push_back({encode(proto::Command::kCheck, {key}), Step::Reply::kU8});
        break;
    }
  }

  std::vector<OpCounter> counts(static_cast<std::size_t>(threads));
  std::atomic<bool> stop{false};
  std::exception_ptr error;
  std::mutex error_mutex;
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      int ep = -1;
      try {
        ep = ::epoll_create1(EPOLL_CLOEXEC);
        if (ep < 0) throw std::runtime_error(fmt::format("epoll_create1: {}", std::strerror(errno)));
        for (std::size_t i = static_cast<std::size_t>(t); i < conns.size(); i += static_cast<std::size_t>(threads)) {
          auto& c = conns[i];
          epoll_event ev{};
          ev.events = EPOLLIN;  // level-triggered: one recv per event, the rest is reported again
          ev.data.ptr = &c;
          if (::epoll_ctl(ep, EPOLL_CTL_ADD, c.fd, &ev) != 0)
            throw std::runtime_error(fmt::format("epoll_ctl: {}", std::strerror(errno)));
          send_step(c);
        }
        auto& count = counts[static_cast<std::size_t>(t)].n;
        std::array<epoll_event, 256> events{};
        while (!stop.load(std::memory_order_relaxed)) {
          int n = ::epoll_wait(ep, events.data(), static_cast<int>(events.size()), 50);
          if (n < 0 && errno != EINTR) throw std::runtime_error(fmt::format("epoll_wait: {}", std::strerror(errno)));
          for (int i = 0; i < n; ++i) {
            auto& c = *static_cast<Conn*>(events[static_cast<std::size_t>(i)].data.ptr);
            if (!receive(c)) continue;
            if (++c.step == c.steps.size()) {
              c.step = 0;
              count.fetch_add(1, std::memory_order_relaxed);
            }
            send_step(c);
          }
        }
      } catch (...) {
        std::lock_guard lock(error_mutex);
        if (!error) error = std::current_exception();
        stop = true;
      }
      if (ep >= 0) ::close(ep);
    });
  }
  auto result = measure_window(counts, server_cpu_seconds, warmup, duration);
  stop = true;
  for (auto& w : workers) w.join();
  if (error) std::rethrow_exception(error);
  return result;
}

}  // namespace ctrun::bench
