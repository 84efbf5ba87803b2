// The workers' init storm (issue 44): N nodes x R ranks each through what torch 2.x's init_process_group does to the
// job's store (storm_group.hpp: VALIDATE+PING, ADD 'init/', the NCCL id's WAIT+GET, the store-based barrier), all
// released at once, in the same run: through a store relay per node (the master holds one connection per node),
// every rank direct to ctstore, and every rank direct to torch 2.6's TCPStore server (the trixie chroot), the direct
// ones only where the master's descriptors allow one connection per rank. Each on a master of its own; the master's
// connections at the end, its requests (torch's server counts none: the ranks' own requests there) and CPU seconds.
// Ranks and relays are split over processes within the descriptors one may hold (both ends of a loopback connection
// in one process cost 2).
#include <signal.h>
#include <sys/resource.h>

#include <filesystem>
#include <regex>

#include <fmt/format.h>

#include "apps/bench/scale_bench/scenario.hpp"

namespace ctrun::scale_bench {

namespace {

constexpr int kNodesPerProcess = 1024;  // relay mode: 1,024 x (listener + upstream + 8 x 2) = 18,432 descriptors

std::uint64_t descriptor_limit() {
  rlimit rl{};
  return getrlimit(RLIMIT_NOFILE, &rl) == 0 ? rl.rlim_max : 1024;
}

// The master of the torch 2.6 mode: its server in the chroot (the process that serves is the python3 whose pid it
// prints; the chain of scripts in front of it does nothing once it runs).
struct TorchMaster {
  std::unique_ptr<Child> process;
  std::uint16_t port = 0;
  pid_t pid = 0;

  explicit TorchMaster(const std::string& launcher) {
    process = std::make_unique<Child>(std::vector<std::string>{launcher, SCALE_BENCH_TORCH26_SERVER});
    static const std::regex pattern(R"(listening on 127\.0\.0\.1:(\d+) pid (\d+))");
    std::smatch m;
    std::string line;
    for (int i = 0; i < 20 && !std::regex_search(line, m, pattern); ++i) line = process->read_line();
    if (m.empty()) throw std::runtime_error("torch 2.6 server: no 'listening on' line; the last: " + line);
    port = static_cast<std::uint16_t>(std::stoi(m[1]));
    pid = std::stoi(m[2]);
  }
  ~TorchMaster() {
    ::kill(pid, SIGTERM);  // the server; its launcher ends with it
    process->finish(20);
  }
};

Row storm(const BenchOptions& o, const std::string& mode, int nodes) {
  const int ranks = o.storm_ranks;
  std::unique_ptr<Master> master;
  std::unique_ptr<TorchMaster> torch;
  std::uint16_t port = 0;
  if (mode == "torch26") {
    torch = std::make_unique<TorchMaster>(o.torch26_launcher);
    port = torch->port;
  } else {
    master = std::make_unique<Master>(o.ctstore);
    port = master->port();
  }
  const auto sample = [&] {
    MasterSample s;
    if (master) return master->sample();
    s.at_ns = now_ns();
    s.cpu_s = cpu_seconds_of(torch->pid);
    return s;
  };
  std::vector<std::unique_ptr<Child>> groups;
  const int procs = (nodes + kNodesPerProcess - 1) / kNodesPerProcess;
  for (int g = 0; g < procs; ++g) {  // one by one: each process's relays dial the master before the next starts
    const int first = static_cast<int>(static_cast<long>(nodes) * g / procs);
    const int next = static_cast<int>(static_cast<long>(nodes) * (g + 1) / procs);
    groups.push_back(std::make_unique<Child>(std::vector<std::string>{
        o.self, "--storm-group", mode == "relay" ? "relay" : "direct", std::to_string(port), std::to_string(first),
        std::to_string(next - first), std::to_string(ranks), std::to_string(nodes)}));
    const auto line = groups.back()->read_line();
    if (line.rfind("ready", 0) != 0) throw std::runtime_error(fmt::format("init storm ({}): {}", mode, line));
  }
  const auto group_cpu = [&] {
    double total = 0;
    for (auto& g : groups) total += g->cpu_seconds();
    return total;
  };
  const auto net0 = net_sample(port);
  const auto before = sample();
  const double groups_before = group_cpu();
  for (auto& g : groups) g->write_line("go");
  JoinResult r;
  for (auto& g : groups) r.merge(JoinResult::decode(g->read_line()));
  const auto after = sample();
  const double groups_cpu = group_cpu() - groups_before;
  auto row = measured(fmt::format("init storm: {}", mode == "relay"    ? "through relays"
                                                    : mode == "direct" ? "direct to ctstore"
                                                                       : "direct to torch 2.6"),
                      nodes, before, after, net0, net_sample(port));
  row.seconds = static_cast<double>(r.last_end_ns - r.first_start_ns) * 1e-9;
  if (torch) {
    row.connections = static_cast<std::uint64_t>(nodes) * ranks - r.failures;  // every rank's, still open
    row.requests = r.ops;
  }
  row.note =
      fmt::format("{} ranks ({} x {}) in {} processes ({:.1f} CPU s{}); the ranks sent {} requests", nodes * ranks,
                  nodes, ranks, procs, groups_cpu, mode == "relay" ? ", relays included" : "", r.ops);
  if (r.failures) row.note += fmt::format("; {} FAILED: {}", r.failures, r.error);
  for (auto& g : groups) g->write_line("quit");
  for (auto& g : groups) g->finish(60);
  return row;
}

}  // namespace

std::vector<Row> init_storm(const BenchOptions& o) {
  std::vector<Row> rows;
  const auto fds = descriptor_limit();
  for (int nodes : o.storm_sizes) {
    for (const auto& mode : o.storm_modes) {
      const bool direct = mode != "relay";
      if (direct && static_cast<std::uint64_t>(nodes) * o.storm_ranks + 200 > fds) {
        Row skipped;
        skipped.scenario = fmt::format("init storm: {} direct", mode == "direct" ? "ctstore" : "torch 2.6");
        skipped.nodes = nodes;
        skipped.note = fmt::format("not run: {} connections on one process, {} descriptors a process may hold",
                                   static_cast<std::uint64_t>(nodes) * o.storm_ranks, fds);
        rows.push_back(skipped);
        continue;
      }
      if (mode == "torch26" && !std::filesystem::exists(o.torch26_launcher)) {
        Row skipped;
        skipped.scenario = "init storm: direct to torch 2.6";
        skipped.nodes = nodes;
        skipped.note = "not run: no " + o.torch26_launcher;
        rows.push_back(skipped);
        continue;
      }
      try {
        rows.push_back(storm(o, mode, nodes));
      } catch (const std::exception& e) {
        Row failed;
        failed.scenario = "FAILED init storm " + mode;
        failed.nodes = nodes;
        failed.note = e.what();
        rows.push_back(failed);
      }
      std::fprintf(stderr, "scale_bench: init storm %s at %d nodes done\n", mode.c_str(), nodes);
    }
  }
  return rows;
}

}  // namespace ctrun::scale_bench
