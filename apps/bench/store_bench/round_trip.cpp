#include "apps/bench/store_bench/round_trip.hpp"

#include <sys/resource.h>

#include <atomic>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "store/tcp_store.hpp"

namespace ctrun::bench {
namespace {
double self_cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  auto sec = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6; };
  return sec(u.ru_utime) + sec(u.ru_stime);
}
}  // namespace

const char* op_name(Op op) {
  switch (op) {
    case Op::kAdd:
      return "ADD";
    case Op::kSetGet:
      return "SET+GET";
    case Op::kCheck:
      return "CHECK";
  }
  return "?";
}

RoundTripResult measure_round_trips(std::uint16_t port, const std::function<double()>& server_cpu_seconds, Op op,
                                    int connections, std::chrono::milliseconds warmup,
                                    std::chrono::milliseconds duration) {
  // Connect everyone first so that connection setup is not part of the measured interval.
  std::vector<std::unique_ptr<store::TcpStore>> clients;
  for (int i = 0; i < connections; ++i) {
    store::TcpStoreOptions o;
    o.port = port;
    o.dialect = store::protocol::Dialect::kLegacy;
    o.timeout = std::chrono::seconds(30);
    o.connect_timeout = std::chrono::seconds(30);
    clients.push_back(std::make_unique<store::TcpStore>(o));
  }
  std::vector<OpCounter> counts(static_cast<std::size_t>(connections));
  std::atomic<bool> stop{false};
  std::exception_ptr error;
  std::mutex error_mutex;
  std::vector<std::thread> threads;
  for (int i = 0; i < connections; ++i) {
    threads.emplace_back([&, i] {
      auto& s = *clients[static_cast<std::size_t>(i)];
      // Per-thread keys: the servers are single-threaded loops either way; distinct keys keep the traffic
      // identical in shape to independent ranks.
      const std::string key = "bench/" + std::to_string(i);
      const std::string value(32, 'v');
      try {
        if (op == Op::kCheck) s.set(key, value);
        while (!stop.load(std::memory_order_relaxed)) {
          switch (op) {
            case Op::kAdd:
              s.add(key, 1);
              break;
            case Op::kSetGet:
              s.set(key, value);
              s.get(key);
              break;
            case Op::kCheck:
              s.check({key});
              break;
          }
          counts[static_cast<std::size_t>(i)].n.fetch_add(1, std::memory_order_relaxed);
        }
      } catch (...) {
        std::lock_guard lock(error_mutex);
        if (!error) error = std::current_exception();
        stop = true;
      }
    });
  }
  auto result = measure_window(counts, server_cpu_seconds, warmup, duration);
  stop = true;
  for (auto& t : threads) t.join();
  if (error) std::rethrow_exception(error);
  return result;
}

RoundTripResult measure_window(const std::vector<OpCounter>& counts, const std::function<double()>& server_cpu_seconds,
                               std::chrono::milliseconds warmup, std::chrono::milliseconds duration) {
  auto total = [&] {
    std::uint64_t sum = 0;
    for (const auto& c : counts) sum += c.n.load(std::memory_order_relaxed);
    return sum;
  };
  std::this_thread::sleep_for(warmup);
  auto n0 = total();
  auto cpu0 = server_cpu_seconds();
  auto self0 = self_cpu_seconds();
  auto t0 = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(duration);
  auto n1 = total();
  auto cpu1 = server_cpu_seconds();
  auto self1 = self_cpu_seconds();
  auto t1 = std::chrono::steady_clock::now();
  auto ops = static_cast<double>(n1 - n0);
  return {.ops_per_second = ops / std::chrono::duration<double>(t1 - t0).count(),
          .server_cpu_us_per_op = ops > 0 ? (cpu1 - cpu0) * 1e6 / ops : 0,
          .client_cpu_us_per_op = ops > 0 ? (self1 - self0) * 1e6 / ops : 0};
}

}  // namespace ctrun::bench
