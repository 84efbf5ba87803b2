// rdzv_bench: time from the last agent's start of next_rendezvous() to every agent holding its round, and the
// store bytes of that round, for N agents (threads, each with its own TCP connections) over one real TCPStore
// server embedded in this process. The peer, torch's DynamicRendezvousHandler over its c10d backend, runs the
// same measurement in torchrun_rdzv.py (started from here, in the same run). With --etcd-endpoints, the same
// handlers also run over the etcd backend (EtcdStore on an etcd cluster, e.g. 3 members from with_etcd.sh).
#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <thread>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "common/log.hpp"
#include "rendezvous/c10d_handler.hpp"
#include "rendezvous/counting_store.hpp"
#include "rendezvous/etcd/etcd_client.hpp"
#include "rendezvous/etcd/etcd_lease.hpp"
#include "rendezvous/etcd/etcd_store.hpp"
#include "rendezvous/keys.hpp"
#include "store/server.hpp"
#include "store/tcp_store.hpp"

using namespace ctrun;
using namespace std::chrono_literals;

namespace {

struct Figure {
  double seconds = 0;
  std::uint64_t bytes = 0;
  std::uint64_t ops = 0;
  std::uint64_t wire = 0;  // etcd only: HTTP bytes of the round (every connection, heartbeats excluded)
};

using Connect = std::function<std::shared_ptr<store::Store>()>;

Figure run_handlers(int n, const Connect& connect, const std::string& run_id, const std::string& backend) {
  auto traffic = std::make_shared<rdzv::StoreTraffic>();
  rdzv::C10dConfig config;
  config.run_id = run_id;
  config.min_nodes = config.max_nodes = n;
  config.settings.join_timeout = 120s;
  config.settings.keep_alive_interval = 60s;  // heartbeats are per interval, not per round: keep them out
  config.backend = backend;
  std::vector<std::unique_ptr<rdzv::C10dHandler>> handlers;
  for (int i = 0; i < n; ++i) {
    bool first = true;  // the first connection (joins, polls) is counted; the heartbeat one is not
    auto counted = [&]() -> std::shared_ptr<store::Store> {
      auto s = connect();
      if (!first) return s;
      first = false;
      return std::make_shared<rdzv::CountingStore>(s, traffic);
    };
    handlers.push_back(
        std::make_unique<rdzv::C10dHandler>(config, rdzv::NodeSpec{fmt::format("node{}", i), 8, "default"}, counted));
    handlers.back()->set_worker_store_address(fmt::format("node{}", i), 29500);
  }
  std::vector<std::chrono::steady_clock::time_point> starts(n), ends(n);
  std::atomic<bool> go{false};
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i)
    threads.emplace_back([&, i] {
      while (!go.load()) std::this_thread::yield();
      starts[i] = std::chrono::steady_clock::now();
      try {
        handlers[i]->next_rendezvous();
      } catch (const std::exception& e) {
        fmt::print(stderr, "agent {}: {}\n", i, e.what());
        failures++;
      }
      ends[i] = std::chrono::steady_clock::now();
    });
  traffic->bytes = 0;
  traffic->ops = 0;
  go = true;
  for (auto& t : threads) t.join();
  Figure f;
  f.seconds = std::chrono::duration<double>(*std::max_element(ends.begin(), ends.end()) -
                                            *std::max_element(starts.begin(), starts.end()))
                  .count();
  f.bytes = traffic->bytes;
  f.ops = traffic->ops;
  for (auto& h : handlers) h->shutdown();
  if (failures) throw std::runtime_error(fmt::format("{} of {} agents failed", failures.load(), n));
  return f;
}

Figure run_ctrun(int n, std::uint16_t port, const std::string& run_id) {
  auto connect = [port] {
    store::TcpStoreOptions o;
    o.host = "127.0.0.1";
    o.port = port;
    o.timeout = 120s;
    return std::make_shared<store::TcpStore>(o);
  };
  return run_handlers(n, connect, run_id, "c10d");
}

// The same handlers on etcd, made as create_handler() makes them: one run lease, a client per store connection.
Figure run_etcd(int n, const std::string& endpoints, const std::string& run_id) {
  rdzv::RendezvousParameters p;
  p.backend = "etcd";
  p.endpoint = endpoints;
  p.config = {{"read_timeout", "120"}, {"lease_ttl", "60"}};
  auto options = rdzv::etcd::parse_options(p);
  auto lease = std::make_shared<rdzv::etcd::RunLease>(std::make_shared<rdzv::etcd::Client>(options),
                                                      rdzv::etcd::EtcdStore::to_etcd(rdzv::Keys(run_id).lease()), 60s);
  auto connect = [options, lease] {
    return std::make_shared<rdzv::etcd::EtcdStore>(std::make_shared<rdzv::etcd::Client>(options), lease, 120s);
  };
  const auto before = rdzv::etcd::wire_bytes();
  auto f = run_handlers(n, connect, run_id, "etcd");
  f.wire = rdzv::etcd::wire_bytes() - before;  // includes the shutdown's close/release writes
  return f;
}

std::map<int, Figure> run_torchrun(const std::vector<int>& sizes) {
  std::map<int, Figure> out;
  std::string args;
  for (int n : sizes)
    if (n > 0) args += fmt::format(" {}", n);
  if (args.empty()) return out;
  const auto cmd = fmt::format("{} {}{}", CTRUN_TORCH_PYTHON, RDZV_BENCH_PEER, args);
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return out;
  char line[512];
  while (std::fgets(line, sizeof line, p)) {
    int n = 0;
    double s = 0;
    unsigned long long b = 0, o = 0;
    if (std::sscanf(line, "torchrun N=%d seconds=%lf bytes=%llu ops=%llu", &n, &s, &b, &o) == 4)
      out[n] = Figure{s, b, o};
  }
  ::pclose(p);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"rdzv_bench: c10d rendezvous of N agents, ctrun vs torch's DynamicRendezvousHandler"};
  std::vector<int> sizes{4, 64, 256, 1024};
  std::vector<int> torch_sizes{4, 64, 128};
  int repeats = 3;
  std::string etcd_endpoints;
  app.add_option("--sizes", sizes, "agent counts for ctrun")->delimiter(',');
  app.add_option("--torch-sizes", torch_sizes, "agent counts for torch (it does not finish 256 here)")->delimiter(',');
  app.add_option("--repeats", repeats, "runs per size for ctrun (median reported)")->check(CLI::Range(1, 20));
  app.add_option("--etcd-endpoints", etcd_endpoints,
                 "also run the etcd backend on this cluster (host:port,...; see with_etcd.sh)");
  CLI11_PARSE(app, argc, argv);
  log::set_default_level(spdlog::level::warn);

  store::ServerOptions so;
  so.host = "127.0.0.1";
  store::Server server(so);
  server.start();

  std::map<int, Figure> ours;
  for (int n : sizes) {
    std::vector<Figure> runs;
    for (int r = 0; r < repeats; ++r) runs.push_back(run_ctrun(n, server.port(), fmt::format("b{}.{}", n, r)));
    std::sort(runs.begin(), runs.end(), [](auto& a, auto& b) { return a.seconds < b.seconds; });
    ours[n] = runs[runs.size() / 2];
  }
  std::map<int, Figure> on_etcd;
  if (!etcd_endpoints.empty())
    for (int n : sizes) {
      std::vector<Figure> runs;
      const auto salt = std::chrono::steady_clock::now().time_since_epoch().count();  // fresh run ids per bench run
      for (int r = 0; r < repeats; ++r)
        runs.push_back(run_etcd(n, etcd_endpoints, fmt::format("e{}.{}.{}", n, r, salt)));
      std::sort(runs.begin(), runs.end(), [](auto& a, auto& b) { return a.seconds < b.seconds; });
      on_etcd[n] = runs[runs.size() / 2];
    }
  auto theirs = run_torchrun(torch_sizes);

  fmt::print("{:>6} | {:>10} {:>12} {:>10} {:>8} | {:>11} {:>12} {:>10} | {:>8}\n", "agents", "ctrun s", "ctrun bytes",
             "B/agent", "ops", "torchrun s", "tr bytes", "B/agent", "speedup");
  for (auto& [n, f] : ours) {
    fmt::print("{:>6} | {:>10.4f} {:>12} {:>10} {:>8} |", n, f.seconds, f.bytes, f.bytes / n, f.ops);
    if (auto it = theirs.find(n); it != theirs.end())
      fmt::print(" {:>11.3f} {:>12} {:>10} | {:>7.0f}x\n", it->second.seconds, it->second.bytes, it->second.bytes / n,
                 it->second.seconds / std::max(f.seconds, 1e-9));
    else
      fmt::print(" {:>11} {:>12} {:>10} | {:>8}\n", "-", "-", "-", "-");
  }
  if (!on_etcd.empty()) {
    fmt::print("\n{:>6} | {:>10} {:>10} {:>8} | {:>10} {:>12} {:>10} {:>8} {:>12}   (same run; etcd at {})\n", "agents",
               "c10d s", "B/agent", "ops", "etcd s", "etcd bytes", "B/agent", "ops", "HTTP B/agent", etcd_endpoints);
    for (auto& [n, f] : on_etcd) {
      const auto& c = ours.at(n);
      fmt::print("{:>6} | {:>10.4f} {:>10} {:>8} | {:>10.4f} {:>12} {:>10} {:>8} {:>12}\n", n, c.seconds, c.bytes / n,
                 c.ops, f.seconds, f.bytes, f.bytes / n, f.ops, f.wire / n);
    }
  }
  return 0;
}
