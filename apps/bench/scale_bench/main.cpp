// scale_bench: what a job of N nodes costs its one store (the master), N up to 16,384, every figure side by side in
// one run. N simulated nodes run the agent's real rendezvous code (C10dHandler, one MuxStore connection each) in
// agent group processes of at most --per-process nodes (a process may hold 20,000 descriptors here) against one real
// ctstore process. Per size, the scenarios of scenario.cpp run on one job in turn: its first round, the steady state
// of the formed round, kill -9 of one member's agent to the next round. Peers in the same run: torch's own c10d
// rendezvous (--torch-sizes) and the etcd backend (--etcd-endpoints). docs/benchmarks.md, "Scale".
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include "apps/bench/scale_bench/scenario.hpp"
#include "apps/bench/scale_bench/storm_group.hpp"
#include "common/log.hpp"

using namespace ctrun;
using namespace ctrun::scale_bench;

namespace {

std::string load_average() {
  double l[3] = {0, 0, 0};
  if (::getloadavg(l, 3) != 3) return "?";
  return fmt::format("{:.2f} {:.2f} {:.2f}", l[0], l[1], l[2]);
}

std::string byte_count(std::uint64_t b) {
  if (b == 0) return "-";
  if (b < 10'000) return fmt::format("{}B", b);
  if (b < 10'000'000) return fmt::format("{:.1f}kB", static_cast<double>(b) / 1e3);
  return fmt::format("{:.1f}MB", static_cast<double>(b) / 1e6);
}

void print(const std::vector<Row>& rows) {
  fmt::print("{:<30} {:>6} | {:>8} | {:>6} {:>10} {:>9} {:>8} {:>8} | {:>5} {:>4} {:>5} {:>4} | {}\n", "scenario",
             "nodes", "time s", "conns", "requests", "bytes", "CPU s", "CPU %", "drops", "RTOs", "retr", "SYNd",
             "note");
  for (const auto& r : rows) {
    const std::string time = r.seconds ? fmt::format("{:.3f}", *r.seconds) : "-";
    std::string requests = r.connections || r.requests ? fmt::format("{}", r.requests) : "-";
    std::string cpu = r.cpu_s ? fmt::format("{:.3f}", *r.cpu_s) : "-";
    std::string share = "-";
    if (r.window_s) {
      requests = fmt::format("{:.0f}/s", static_cast<double>(r.requests) / *r.window_s);
      if (r.cpu_s) {
        cpu = fmt::format("{:.3f}/s", *r.cpu_s / *r.window_s);
        share = fmt::format("{:.2f}", 100.0 * *r.cpu_s / *r.window_s);
      }
    }
    fmt::print("{:<30} {:>6} | {:>8} | {:>6} {:>10} {:>9} {:>8} {:>8} | {:>5} {:>4} {:>5} {:>4} | {}\n", r.scenario,
               r.nodes, time, r.connections ? std::to_string(r.connections) : "-", requests, byte_count(r.bytes), cpu,
               share, r.net.backlog_drops, r.net.timeouts, r.net.retransmits, r.net.syn_drops, r.note);
  }
}

// The median (by time) of rows of one scenario.
Row median(std::vector<Row> rows) {
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.seconds < b.seconds; });
  auto r = rows[rows.size() / 2];
  if (rows.size() > 1)
    r.note += fmt::format("; median of {} (fastest {:.3f} s, slowest {:.3f} s)", rows.size(), *rows.front().seconds,
                          *rows.back().seconds);
  return r;
}

int bench(int argc, char** argv) {
  BenchOptions o;
  o.sizes = {1024, 4096, 16384};
  o.self = self_exe();
  o.ctstore = o.self.substr(0, o.self.rfind('/') + 1) + "ctstore";
  CLI::App app{"scale_bench: what N nodes cost their one store: a round, kill -9 to the next round, the steady state"};
  app.add_option("--sizes", o.sizes, "node counts")->delimiter(',')->capture_default_str();
  app.add_option("--repeats", o.repeats, "first rounds per size (median; each on a fresh job)")
      ->check(CLI::Range(1, 20))
      ->capture_default_str();
  app.add_option("--per-process", o.per_process, "simulated nodes per agent group process")
      ->check(CLI::Range(1, 19000))
      ->capture_default_str();
  app.add_option("--threads", o.threads, "runner threads per agent group process")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--idle-window", o.idle_window_s, "seconds of the steady state measured")
      ->check(CLI::Range(1.0, 600.0))
      ->capture_default_str();
  app.add_option("--ctstore", o.ctstore, "the ctstore binary (the master)")->capture_default_str();
  app.add_option("--torch-sizes", o.torch_sizes,
                 "torchrun's own rendezvous at these sizes too (it does not finish 256)")
      ->delimiter(',');
  app.add_option("--etcd-endpoints", o.etcd_endpoints,
                 "the etcd backend too, on this cluster (host:port,...; see with_etcd.sh), at sizes up to 1024");
  o.storm_sizes = {2048, 16384};
  o.torch26_launcher = SCALE_BENCH_TORCH26_LAUNCHER;
  app.add_option("--storm-sizes", o.storm_sizes, "the workers' init storm at these node counts (none: '')")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--storm-ranks", o.storm_ranks, "ranks per node in the init storm")
      ->check(CLI::Range(1, 8))
      ->capture_default_str();
  app.add_option("--storm-modes", o.storm_modes, "relay, direct (to ctstore), torch26 (direct to torch 2.6's server)")
      ->delimiter(',')
      ->check(CLI::IsMember({"relay", "direct", "torch26"}))
      ->capture_default_str();
  app.add_option("--torch26-python", o.torch26_launcher, "runs a script with torch 2.6's python3")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  log::set_default_level(spdlog::level::warn);
  ::signal(SIGPIPE, SIG_IGN);
  ::setenv("CTRUN_LOG_LEVEL", "warn", 0);  // ctstore's start/stop lines are noise here (a level given wins)

  fmt::print("scale_bench: load average {} at the start; {} nodes per agent group process, {} runner threads each\n",
             load_average(), o.per_process, o.threads);
  std::vector<Row> rows;
  int jobs = 0;
  for (int n : o.sizes) {
    try {
      std::vector<Row> rounds;
      for (int r = 0; r + 1 < o.repeats; ++r) {  // the extra first rounds, each on a fresh job
        Job job(o, n, fmt::format("s{}.{}", n, jobs++));
        rounds.push_back(round_scenario(job).front());
        job.members->quit();
        job.victim->quit();
      }
      Job job(o, n, fmt::format("s{}.{}", n, jobs++));
      for (const auto& s : scenarios()) {
        auto got = s.run(job);
        if (std::strcmp(s.name, "round") == 0) {
          rounds.push_back(got.front());
          rows.push_back(median(rounds));
        } else {
          rows.insert(rows.end(), got.begin(), got.end());
        }
      }
      job.members->quit();
      if (job.spare) job.spare->quit();
    } catch (const std::exception& e) {
      Row failed;
      failed.scenario = "FAILED";
      failed.nodes = n;
      failed.note = e.what();
      rows.push_back(failed);
    }
    std::fprintf(stderr, "scale_bench: %d nodes done (load %s)\n", n, load_average().c_str());
  }
  for (const auto& s : standalone_scenarios())
    for (auto& r : s.run(o)) rows.push_back(r);
  fmt::print("\n");
  print(rows);
  fmt::print("\nload average {} at the end\n", load_average());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc > 1 && std::strcmp(argv[1], "--agent-group") == 0) return agent_group_main(argc, argv);
    if (argc > 1 && std::strcmp(argv[1], "--storm-group") == 0) return storm_group_main(argc, argv);
    return bench(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "scale_bench: %s\n", e.what());
    return 1;
  }
}
