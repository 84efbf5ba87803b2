#include "apps/bench/scale_bench/storm_group.hpp"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <future>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include "apps/bench/scale_bench/agent_group.hpp"
#include "apps/bench/scale_bench/child.hpp"
#include "common/log.hpp"
#include "store/protocol.hpp"
#include "store/relay.hpp"

namespace ctrun::scale_bench {
namespace {

using namespace std::chrono_literals;
namespace protocol = store::protocol;
using protocol::Command;

const std::string kInitKey = "init/";
const std::string kSharedKey = "/default_pg/nccl_unique_id";
const std::string kBarrierKey = "/default_pg/store_based_barrier_key:0";
const std::string kLastWorkerKey = kBarrierKey + "/last_worker";

// One rank's init, request by request (each waits for its reply, as torch's blocking client does).
struct Rank {
  int fd = -1;
  int global = 0;
  std::uint32_t host = 0;  // IPv4, host order
  std::uint16_t port = 0;
  int step = 0;  // the request in flight (see next_request)
  std::int64_t count = 0;
  std::string out;       // unsent bytes
  std::string in;        // received, not yet a whole reply
  std::size_t need = 0;  // bytes of the reply in flight (0: none expected)
  bool get_reply = false;
  bool connected = false;
  bool done = false;
};

struct Endpoint {
  std::uint32_t host = 0;  // IPv4, host order
  std::uint16_t port = 0;
};

// Node i's relay listens on an address of its own in 127/8 (loopback): 16,384 listeners on 127.0.0.1 would take as
// many of the ~28,000 ephemeral ports the relays' own upstream connections need; on distinct addresses the kernel
// gives them the same few port numbers.
std::uint32_t relay_host(int node) {
  return (127u << 24) | (1u << 16) | (static_cast<std::uint32_t>(node / 250) << 8) |
         static_cast<std::uint32_t>(1 + node % 250);
}

enum Step {
  kHello,
  kAddInit,
  kSetShared,
  kWaitShared,
  kGetShared,
  kAddBarrier,
  kCountBarrier,
  kSetLast,
  kWaitLast,
  kDone
};

std::string encode(const protocol::Request& r) {
  std::string out;
  protocol::encode_request(protocol::Dialect::kV2, r, out);
  return out;
}

class Storm {
 public:
  Storm(const std::vector<Endpoint>& ports, int first_rank, int ranks_per_port, int world)
      : world_(world), ep_(::epoll_create1(EPOLL_CLOEXEC)) {
    for (std::size_t p = 0; p < ports.size(); ++p)
      for (int r = 0; r < ranks_per_port; ++r) {
        Rank k;
        k.global = first_rank + static_cast<int>(p) * ranks_per_port + r;
        k.host = ports[p].host;
        k.port = ports[p].port;
        ranks_.push_back(k);
      }
  }
  ~Storm() {
    for (auto& r : ranks_)
      if (r.fd >= 0) ::close(r.fd);
    ::close(ep_);
  }

  JoinResult run(std::chrono::seconds limit) {
    JoinResult res;
    res.first_start_ns = now_ns();
    for (std::size_t i = 0; i < ranks_.size(); ++i) start(i);
    const auto deadline = std::chrono::steady_clock::now() + limit;
    std::vector<epoll_event> events(1024);
    while (done_ + failed_ < ranks_.size() && std::chrono::steady_clock::now() < deadline) {
      const int n = ::epoll_wait(ep_, events.data(), static_cast<int>(events.size()), 100);
      for (int e = 0; e < n; ++e) on_event(events[e].data.u64, events[e].events, res);
    }
    res.nodes = ranks_.size();
    res.failures = ranks_.size() - done_;  // failed, or not done in time
    if (res.failures && res.error.empty())
      res.error = fmt::format("{} ranks did not finish within {} s", res.failures, limit.count());
    res.ops = requests_;
    res.bytes = bytes_;
    if (res.first_end_ns == 0) res.first_end_ns = res.last_end_ns = now_ns();
    return res;
  }

 private:
  void start(std::size_t i) {
    auto& r = ranks_[i];
    r.fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (r.fd < 0) throw std::runtime_error(fmt::format("scale_bench: socket: {}", std::strerror(errno)));
    const int one = 1;
    ::setsockopt(r.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(r.port);
    a.sin_addr.s_addr = htonl(r.host);
    if (::connect(r.fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 && errno != EINPROGRESS)
      throw std::runtime_error(fmt::format("scale_bench: connect: {}", std::strerror(errno)));
    epoll_event ev{};
    ev.events = EPOLLOUT | EPOLLIN | EPOLLET;  // edge-triggered: registered once, never modified
    ev.data.u64 = i;
    ::epoll_ctl(ep_, EPOLL_CTL_ADD, r.fd, &ev);
  }

  void fail(Rank& r, JoinResult& res, const std::string& why) {
    if (r.done) return;
    r.done = true;
    ++failed_;
    if (res.error.empty()) res.error = fmt::format("rank {}: {}", r.global, why);
    ::epoll_ctl(ep_, EPOLL_CTL_DEL, r.fd, nullptr);
  }

  // Queues the request of r.step (skipping what this rank does not do) and what its reply is.
  void next_request(Rank& r, JoinResult& res) {
    protocol::Request q;
    for (;;) {
      r.need = 0;
      r.get_reply = false;
      switch (r.step) {
        case kHello:
          r.out += encode({Command::kValidate, {}, {}, 0, protocol::kValidationMagic});
          q = {Command::kPing, {}, {}, 0, static_cast<std::uint32_t>(1000 + r.global % 100000)};
          r.need = 4;
          break;
        case kAddInit:
          q = {Command::kAdd, {kInitKey}, {}, 1};
          r.need = 8;
          break;
        case kSetShared:
          if (r.global != 0) {
            ++r.step;
            continue;
          }
          q = {Command::kSet, {kSharedKey}, {std::string(128, 'u')}};
          break;
        case kWaitShared:
          q = {Command::kWait, {kSharedKey}};
          r.need = 1;
          break;
        case kGetShared:
          q = {Command::kGet, {kSharedKey}};
          r.need = 8;
          r.get_reply = true;
          break;
        case kAddBarrier:
          q = {Command::kAdd, {kBarrierKey}, {}, 1};
          r.need = 8;
          break;
        case kCountBarrier:
          q = {Command::kAdd, {kBarrierKey}, {}, 0};
          r.need = 8;
          break;
        case kSetLast:
          if (r.count != world_) {
            ++r.step;
            continue;
          }
          q = {Command::kSet, {kLastWorkerKey}, {"1"}};
          break;
        case kWaitLast:
          q = {Command::kWait, {kLastWorkerKey}};
          r.need = 1;
          break;
        default:
          r.done = true;
          ++done_;
          const auto t = now_ns();
          res.first_end_ns = res.first_end_ns ? std::min(res.first_end_ns, t) : t;
          res.last_end_ns = std::max(res.last_end_ns, t);
          return;
      }
      r.out += encode(q);
      ++requests_;
      if (r.need) break;
      ++r.step;  // no reply: on to the next
    }
  }

  bool flush(Rank& r) {
    while (!r.out.empty()) {
      const auto n = ::send(r.fd, r.out.data(), r.out.size(), MSG_NOSIGNAL);
      if (n < 0) return errno == EAGAIN || errno == EWOULDBLOCK;
      bytes_ += static_cast<std::uint64_t>(n);
      r.out.erase(0, static_cast<std::size_t>(n));
    }
    return true;
  }

  void on_event(std::size_t i, std::uint32_t events, JoinResult& res) {
    auto& r = ranks_[i];
    if (r.done) return;
    if (!r.connected) {
      int err = 0;
      socklen_t len = sizeof err;
      ::getsockopt(r.fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err != 0) return fail(r, res, fmt::format("connect: {}", std::strerror(err)));
      if (!(events & EPOLLOUT)) return;
      r.connected = true;
      next_request(r, res);
    }
    if (!flush(r)) return fail(r, res, "send failed");
    char buf[4096];
    for (;;) {
      const auto n = ::recv(r.fd, buf, sizeof buf, 0);
      if (n == 0) return fail(r, res, fmt::format("the store closed the connection at step {}", r.step));
      if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        return fail(r, res, fmt::format("recv: {}", std::strerror(errno)));
      }
      bytes_ += static_cast<std::uint64_t>(n);
      r.in.append(buf, static_cast<std::size_t>(n));
    }
    while (r.need && r.in.size() >= r.need) {
      if (r.get_reply) {  // u64 length, then the value
        std::uint64_t len = 0;
        std::memcpy(&len, r.in.data(), 8);
        if (r.in.size() < 8 + len) break;
        r.in.erase(0, 8 + len);
      } else {
        if (r.step == kCountBarrier) std::memcpy(&r.count, r.in.data(), 8);
        r.in.erase(0, r.need);
      }
      ++r.step;
      next_request(r, res);
      if (r.done) {  // stays connected (a worker keeps its store) but is not read
        ::epoll_ctl(ep_, EPOLL_CTL_DEL, r.fd, nullptr);
        return;
      }
      if (!flush(r)) return fail(r, res, "send failed");
    }
  }

  std::vector<Rank> ranks_;
  std::int64_t world_;
  int ep_;
  std::size_t done_ = 0, failed_ = 0;
  std::uint64_t requests_ = 0, bytes_ = 0;
};

void say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

}  // namespace

int storm_group_main(int argc, char** argv) {
  if (argc != 8) {
    std::fprintf(stderr,
                 "usage: scale_bench --storm-group relay|direct PORT FIRST_NODE NODES RANKS WORLD_NODES (internal)\n");
    return 2;
  }
  begin_child_process();
  const std::string mode = argv[2];
  const auto port = static_cast<std::uint16_t>(std::stoi(argv[3]));
  const int first = std::stoi(argv[4]), nodes = std::stoi(argv[5]), ranks = std::stoi(argv[6]);
  const int world = std::stoi(argv[7]) * ranks;
  boost::asio::io_context io;
  std::vector<std::unique_ptr<store::Relay>> relays;
  std::vector<Endpoint> ports;
  std::thread io_thread;
  try {
    if (mode == "relay") {
      for (int n = 0; n < nodes; ++n) {
        store::RelayOptions options;
        options.connect_timeout = std::chrono::minutes(5);  // a loaded machine's SYN retries, not a dead store
        const std::uint32_t host = relay_host(first + n);
        options.server.host = fmt::format("127.{}.{}.{}", (host >> 16) & 255, (host >> 8) & 255, host & 255);
        relays.push_back(std::make_unique<store::Relay>(options, &io));
        relays.back()->start();
        relays.back()->connect("127.0.0.1", port);
        ports.push_back({host, relays.back()->port()});
      }
      auto guard =
          std::make_shared<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>>(io.get_executor());
      io_thread = std::thread([&io, guard] { io.run(); });
      const auto deadline = std::chrono::steady_clock::now() + 300s;
      for (;;) {
        std::promise<int> ready;
        boost::asio::post(io, [&] {
          int up = 0;
          for (auto& r : relays) up += r->stats().upstream_ready;
          ready.set_value(up);
        });
        const int up = ready.get_future().get();
        if (up == nodes) break;
        if (std::chrono::steady_clock::now() > deadline)
          throw std::runtime_error(fmt::format("{} of {} relays reached the store within 300 s", up, nodes));
        std::this_thread::sleep_for(50ms);
      }
    } else if (mode == "direct") {
      ports.assign(nodes, Endpoint{INADDR_LOOPBACK, port});
    } else {
      throw std::runtime_error("mode is relay or direct, not " + mode);
    }
  } catch (const std::exception& e) {
    std::string what = e.what();
    std::replace(what.begin(), what.end(), '\n', ' ');
    say("error " + what);
    if (io_thread.joinable()) {
      io.stop();
      io_thread.join();
    }
    return 1;
  }
  say(fmt::format("ready {}", nodes * ranks));
  std::unique_ptr<Storm> storm;
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line == "go") {
      storm = std::make_unique<Storm>(ports, first * ranks, ranks, world);
      auto r = storm->run(300s);
      std::replace(r.error.begin(), r.error.end(), '\n', ' ');
      say(r.encode());
    } else if (line == "quit") {
      break;
    }
  }
  storm.reset();
  if (io_thread.joinable()) {
    boost::asio::post(io, [&] {
      for (auto& r : relays) r->stop();
    });
    io.stop();
    io_thread.join();
  }
  relays.clear();
  say("bye");
  return 0;
}

}  // namespace ctrun::scale_bench
