// store_bench: ctstore vs torch 1.13's own TCPStore server in the same run, with identical traffic (our
// TcpStore client in the legacy dialect, which both servers speak):
//   - round-trip ops/s for ADD, SET+GET and CHECK with 1, 16 and 64 connections, under two load generators:
//     "events" (one epoll thread drives all connections, one request outstanding each: shows the server's
//     own efficiency) and "threads" (a TcpStore client thread per connection: realistic clients);
//   - a connection storm: N connections at once, each sending ADD "init/" 1, time until every reply arrived;
//   - server RSS with N idle connections (VmRSS after the storm minus before, per connection).
// Prints a side-by-side table with the ratio and whether the targets in docs/benchmarks.md are met.
// Usage: store_bench [--duration-ms 1000] [--rounds 3] [--connections 1,16,64] [--load events,threads]
//                    [--load-threads 1] [--storm 4000] [--repeats 3]

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <thread>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "apps/bench/store_bench/connection_storm.hpp"
#include "apps/bench/store_bench/event_load.hpp"
#include "apps/bench/store_bench/round_trip.hpp"
#include "apps/bench/store_bench/floor_server.hpp"
#include "apps/bench/store_bench/server_under_test.hpp"
#include "store/tcp_store.hpp"

namespace ctrun::bench {
namespace {

struct StormFigures {
  std::vector<double> seconds;
  int reconnects = 0;
  double idle_bytes_per_conn = 0;
  std::int64_t counter = 0;  // "init/" after the first storm: must equal the connection count
};

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// The storm on a fresh server; the first repeat also measures idle-connection memory and the counter.
void storm_once(ServerUnderTest server, int connections, bool measure_memory, StormFigures& out) {
  // Let the freshly started server settle so the baseline is its steady idle footprint.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  long before = server.rss_kib();
  auto storm = run_storm(server.port, connections, std::chrono::seconds(60));
  out.seconds.push_back(storm.seconds);
  out.reconnects += storm.reconnects;
  if (!measure_memory) return;
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // every connection now idle
  long after = server.rss_kib();
  out.idle_bytes_per_conn = static_cast<double>(after - before) * 1024.0 / connections;
  store::TcpStoreOptions o;
  o.port = server.port;
  o.dialect = store::protocol::Dialect::kLegacy;
  o.key_prefix = "";
  out.counter = store::TcpStore(o).add("init/", 0);
}

int run(int argc, char** argv) {
  CLI::App app{"TCPStore server benchmark: ctstore vs torch's own TCPStore server, same client traffic"};
  int duration_ms = 1000, warmup_ms = 200, storm_n = 4000, repeats = 3, rounds = 3, background_idle = 0;
  std::vector<int> conn_counts{1, 16, 64};
  std::vector<std::string> loads{"events", "threads"};
  int load_threads = 1;
  std::string ctstore = (std::filesystem::read_symlink("/proc/self/exe").parent_path() / "ctstore").string();
  std::string python = CTRUN_TORCH_PYTHON;
  std::string torch_script = std::string(CTRUN_SHARED_DIR) + "/peers/torch_store_server.py";
  app.add_option("--duration-ms", duration_ms, "measured time per round-trip point")->capture_default_str();
  app.add_option("--warmup-ms", warmup_ms, "unmeasured time before each point")->capture_default_str();
  app.add_option("--connections", conn_counts, "connection counts for the round-trip points")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--rounds", rounds, "measurements per round-trip point and server, alternating (median)")
      ->capture_default_str();
  app.add_option("--storm", storm_n, "connections in the storm and the idle-memory measurement")->capture_default_str();
  app.add_option("--repeats", repeats, "storm repetitions (fresh servers; the median is reported)")
      ->capture_default_str();
  app.add_option("--background-idle", background_idle,
                 "idle connections held open on each server during the round-trip points (a torch 1.13 job holds "
                 "one idle callback connection per rank)")
      ->capture_default_str();
  app.add_option("--load", loads,
                 "load generators for the round trips: events (one epoll thread drives every connection), threads "
                 "(a TcpStore client thread per connection)")
      ->delimiter(',')
      ->check(CLI::IsMember({"events", "threads"}))
      ->capture_default_str();
  app.add_option("--load-threads", load_threads, "epoll threads of the event-driven load generator")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--ctstore", ctstore, "ctstore binary")->capture_default_str();
  app.add_option("--python", python, "python3 with torch")->capture_default_str();
  app.add_option("--torch-server", torch_script, "torch_store_server.py")->capture_default_str();
  bool serve_floor_only = false, with_floor = true;
  app.add_flag("--serve-floor", serve_floor_only, "internal: run the floor server (used as a child process)");
  app.add_option("--floor", with_floor,
                 "also measure ADD on the physical floor: a minimal epoll server answering legacy ADD only")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (serve_floor_only) return serve_floor();

  // Both the bench and the servers (which inherit it) hold one fd per storm connection.
  rlimit lim{};
  ::getrlimit(RLIMIT_NOFILE, &lim);
  lim.rlim_cur = lim.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &lim);
  if (lim.rlim_cur < static_cast<rlim_t>(storm_n) + 256)
    throw std::runtime_error(fmt::format("ulimit -n is {}: raise it above {} for a {}-connection storm", lim.rlim_cur,
                                         storm_n + 256, storm_n));

  struct Contender {
    std::string name;
    std::function<ServerUnderTest()> start;
  };
  std::vector<Contender> contenders{{"ctstore", [&] { return start_ctstore(ctstore); }},
                                    {"torch", [&] { return start_torch_server(python, torch_script); }}};

  fmt::print("store_bench: {} CPUs ({}), {} ms per point after {} ms warm-up, legacy-dialect traffic on loopback\n",
             ::sysconf(_SC_NPROCESSORS_ONLN), cpu_model(), duration_ms, warmup_ms);
  std::fflush(stdout);

  // Round trips: both servers up at once, measured alternately per point so drift hits both alike. Each load
  // generator gets its own table: "events" (one epoll thread for all connections: the client costs little, so
  // the server's efficiency shows) and "threads" (a thread per connection with our TcpStore: realistic clients,
  // but on a small machine they cost as much CPU as the server and bound the rate).
  const std::vector<Op> ops{Op::kAdd, Op::kSetGet, Op::kCheck};
  {
    std::vector<ServerUnderTest> servers;
    for (auto& c : contenders) servers.push_back(c.start());
    // The floor answers ADD only: it runs in the ADD points, in the same alternation as the others.
    std::optional<ServerUnderTest> floor;
    if (with_floor)
      floor = start_floor(std::filesystem::read_symlink("/proc/self/exe").string());
    std::vector<ConnectionSet> idle;  // closed when the round-trip points are done
    for (auto& s : servers)
      if (background_idle > 0)
        idle.push_back(std::move(run_storm(s.port, background_idle, std::chrono::seconds(60)).connections));
    if (background_idle > 0) fmt::print("{} idle connections held open on each server\n", background_idle);
    for (const auto& gen : loads) {
      const bool events = gen == "events";
      if (events)
        fmt::print(
            "\nround trips, event-driven load generator ({} epoll thread(s) for all connections, one request "
            "outstanding per connection, raw legacy-dialect requests):\n",
            load_threads);
      else
        fmt::print("\nround trips, realistic clients (a thread per connection, our TcpStore, legacy dialect):\n");
      fmt::print("{:<9} {:>6} {:>14} {:>14} {:>7}   {:>22} {:>22}\n", "op", "conns", "ctstore ops/s", "torch ops/s",
                 "ratio", "ctstore cpu us/op s+c", "torch cpu us/op s+c");
      std::map<std::string, std::map<std::pair<Op, int>, RoundTripResult>> rate;
      for (auto op : ops) {
        for (int conns : conn_counts) {
          std::map<std::string, std::vector<RoundTripResult>> runs;
          std::vector<ServerUnderTest*> measured;
          for (auto& s : servers) measured.push_back(&s);
          if (floor && op == Op::kAdd) measured.push_back(&*floor);
          for (int r = 0; r < rounds; ++r)
            for (auto* sp : measured) {
              auto& s = *sp;
              auto cpu = [&s] { return s.cpu_seconds(); };
              runs[s.name].push_back(
                  events
                      ? measure_event_driven(s.port, cpu, op, conns, load_threads, std::chrono::milliseconds(warmup_ms),
                                             std::chrono::milliseconds(duration_ms))
                      : measure_round_trips(s.port, cpu, op, conns, std::chrono::milliseconds(warmup_ms),
                                            std::chrono::milliseconds(duration_ms)));
            }
          for (auto& [name, v] : runs) {
            std::sort(v.begin(), v.end(), [](auto& x, auto& y) { return x.ops_per_second < y.ops_per_second; });
            rate[name][{op, conns}] = v[v.size() / 2];
          }
          auto a = rate["ctstore"][{op, conns}], b = rate["torch"][{op, conns}];
          fmt::print("{:<9} {:>6} {:>14.0f} {:>14.0f} {:>6.2f}x   {:>10.2f} + {:>9.2f} {:>10.2f} + {:>9.2f}\n",
                     op_name(op), conns, a.ops_per_second, b.ops_per_second, a.ops_per_second / b.ops_per_second,
                     a.server_cpu_us_per_op, a.client_cpu_us_per_op, b.server_cpu_us_per_op, b.client_cpu_us_per_op);
          std::fflush(stdout);
        }
      }
      fmt::print(
          "(median of {} alternating runs per point; cpu us/op = server + client CPU time, user + system, per "
          "op: each side's own cost, whoever is the bottleneck)\n",
          rounds);
      if (floor) {
        fmt::print("\nADD against the physical floor (minimal epoll server, legacy ADD only; same {} load):\n", gen);
        fmt::print("{:>6} {:>14} {:>14} {:>14} {:>11} {:>14}\n", "conns", "ctstore ops/s", "floor ops/s",
                   "torch ops/s", "% of floor", "floor srv us/op");
        for (int conns : conn_counts) {
          auto a = rate["ctstore"][{Op::kAdd, conns}], f = rate["floor"][{Op::kAdd, conns}],
               t = rate["torch"][{Op::kAdd, conns}];
          fmt::print("{:>6} {:>14.0f} {:>14.0f} {:>14.0f} {:>10.1f}% {:>14.2f}\n", conns, a.ops_per_second,
                     f.ops_per_second, t.ops_per_second, 100.0 * a.ops_per_second / f.ops_per_second,
                     f.server_cpu_us_per_op);
        }
        std::fflush(stdout);
      }
      // The targets docs/benchmarks.md states.
      bool ops_ok = true;
      for (auto op : ops)
        for (int conns : conn_counts)
          if (conns >= 16 &&
              rate["ctstore"][{op, conns}].ops_per_second < 2 * rate["torch"][{op, conns}].ops_per_second)
            ops_ok = false;
      fmt::print("target ops/s >= 2x torch at >= 16 connections ({} load): {}\n", gen, ops_ok ? "MET" : "MISSED");
    }
  }
  if (repeats <= 0) return 0;  // --repeats 0: round trips only

  // Storm + idle memory: a fresh server per repeat, alternating.
  std::map<std::string, StormFigures> storm;
  for (int r = 0; r < repeats; ++r)
    for (auto& c : contenders) storm_once(c.start(), storm_n, r == 0, storm[c.name]);
  auto& sa = storm["ctstore"];
  auto& sb = storm["torch"];
  double ta = median(sa.seconds), tb = median(sb.seconds);
  fmt::print("\nstorm: {} connections each ADD init/ (median of {} fresh servers)\n", storm_n, repeats);
  fmt::print("{:<9} {:>12} {:>12} {:>12} {:>18}\n", "server", "seconds", "reconnects", "init/ count",
             "idle bytes/conn");
  for (auto* name : {"ctstore", "torch"}) {
    auto& s = storm[name];
    fmt::print("{:<9} {:>12.3f} {:>12} {:>12} {:>18.0f}\n", name, median(s.seconds), s.reconnects, s.counter,
               s.idle_bytes_per_conn);
  }
  fmt::print("storm ratio (torch time / ctstore time): {:.2f}x\n", tb / ta);

  fmt::print("target storm >= 3x faster: {} ({:.2f}x)\n", tb / ta >= 3 ? "MET" : "MISSED", tb / ta);
  fmt::print("target <= 16 KiB per idle connection: {} ({:.1f} KiB)\n",
             sa.idle_bytes_per_conn <= 16 * 1024 ? "MET" : "MISSED", sa.idle_bytes_per_conn / 1024);
  if (sa.counter != storm_n || sb.counter != storm_n)
    fmt::print("WARNING: init/ counter is {} (ctstore) / {} (torch), expected {}\n", sa.counter, sb.counter, storm_n);
  return 0;
}

}  // namespace
}  // namespace ctrun::bench

int main(int argc, char** argv) {
  try {
    return ctrun::bench::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "store_bench: %s\n", e.what());
    return 1;
  }
}
