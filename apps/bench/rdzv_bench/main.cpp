// rdzv_bench: one c10d rendezvous round of N agents (--nnodes N:N) over one real TCPStore server: the time from
// releasing every agent (all connected, their threads parked) to every agent holding its round, the store
// traffic of that round (Store-interface operations and bytes, and the server's own count of wire requests), and
// where the CPU went (the store server vs the agents). The peer, torch's DynamicRendezvousHandler over its c10d
// backend, runs the same round in torchrun_rdzv.py (started from here, in the same run). With --etcd-endpoints,
// the same handlers also run over the etcd backend (EtcdStore on an etcd cluster, e.g. 3 members from
// with_etcd.sh).
//
// Harness (docs/benchmarks.md, "Rendezvous scale"): by default the store is a ctstore process and the N agents
// are split over --procs processes (this program re-executed with --agent-group), so neither the server nor the
// agents share an address space, an allocator or a scheduler queue of thousands of threads with the others.
// --procs 0 --store thread is the old harness: everything in this process.
#include <signal.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "apps/bench/rdzv_bench/agent_group.hpp"
#include "apps/bench/rdzv_bench/child.hpp"
#include "common/log.hpp"
#include "rendezvous/etcd/etcd_client.hpp"
#include "rendezvous/etcd/etcd_lease.hpp"
#include "rendezvous/etcd/etcd_store.hpp"
#include "rendezvous/keys.hpp"
#include "rendezvous/parameters.hpp"
#include "store/server.hpp"
#include "store/tcp_store.hpp"

using namespace ctrun;
using namespace ctrun::rdzv_bench;
using namespace std::chrono_literals;

namespace {

constexpr const char* kAgentGroupFlag = "--agent-group";

// Packet loss during a round. backlog_drops: machine-wide packets the kernel dropped because a CPU's input backlog
// was full (/proc/net/softnet_stat, column 2; loopback traffic goes through it, and it overflows when softirq work
// is deferred to a starved ksoftirqd). timeouts: machine-wide TCP retransmission timeouts (/proc/net/netstat
// TCPTimeouts): on loopback each costs >= 200 ms to its connection, so a round with any shows them in its time.
// retransmits: TCP retransmissions on the bench's own connections (both ends, from `ss -ti` before they close);
// on a loaded machine these are mostly tail-loss probes answered by a D-SACK (an ACK came late; nothing was lost).
struct NetCounters {
  std::uint64_t backlog_drops = 0;
  std::uint64_t timeouts = 0;
  std::uint64_t retransmits = 0;
};

std::uint64_t tcp_timeouts() {
  std::ifstream netstat("/proc/net/netstat");
  std::string names, values;
  while (std::getline(netstat, names) && std::getline(netstat, values)) {
    if (names.rfind("TcpExt:", 0) != 0) continue;
    std::istringstream n(names), v(values);
    std::string name, value;
    while (n >> name && v >> value)
      if (name == "TCPTimeouts") return std::stoull(value);
  }
  return 0;
}

std::uint64_t backlog_drops() {
  std::uint64_t total = 0;
  std::ifstream softnet("/proc/net/softnet_stat");
  std::string line;
  while (std::getline(softnet, line)) {
    std::istringstream in(line);
    std::string processed, dropped;
    if (in >> processed >> dropped) total += std::stoull(dropped, nullptr, 16);
  }
  return total;
}

// Sum of "retrans:<now>/<total>" totals over the established connections to or from `port`.
std::uint64_t retransmits_on(std::uint16_t port) {
  const auto cmd = fmt::format("ss -tinH state established '( sport = :{0} or dport = :{0} )' 2>/dev/null", port);
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return 0;
  std::uint64_t total = 0;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p)) {
    const char* r = std::strstr(buf, "retrans:");
    if (!r) continue;
    const char* slash = std::strchr(r, '/');
    if (slash) total += std::strtoull(slash + 1, nullptr, 10);
  }
  ::pclose(p);
  return total;
}

struct Figure {
  double seconds = 0;           // release of every agent -> every agent holds its round
  double since_last_start = 0;  // the last agent's start -> every agent holds its round (the old measure)
  double first_done = 0;        // release -> the first agent holds its round (the round is published)
  NetCounters net;              // packet drops (machine-wide) and retransmissions (the bench's) during the round
  std::uint64_t bytes = 0;      // Store-interface bytes of the round
  std::uint64_t ops = 0;        // Store-interface operations of the round
  std::uint64_t requests = 0;   // wire requests the server handled meanwhile (every connection)
  double server_cpu = -1;       // CPU seconds of the store server meanwhile (-1: not measurable here)
  double server_sys = 0;        // of which in the kernel
  double agents_cpu = 0;        // CPU seconds of the agents' processes meanwhile
  double agents_sys = 0;        // of which in the kernel
  std::uint64_t csw = 0;        // context switches of the agents' processes meanwhile
  std::uint64_t wire = 0;       // etcd only: HTTP bytes of the round (every connection, heartbeats excluded)
};

void raise_fd_limit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

std::shared_ptr<store::Store> connect_tcp(std::uint16_t port) {
  store::TcpStoreOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  o.timeout = 120s;
  o.connect_timeout = 120s;
  return std::make_shared<store::TcpStore>(o);
}

// `rdzv_bench --agent-group PORT RUN_ID N FIRST COUNT`: agents FIRST.. of an N-agent round, in this process.
// Protocol on stdin/stdout: "ready" once parked; "go" -> the round -> "result ..."; "stop" -> shutdown, exit.
int agent_group_main(int argc, char** argv) {
  if (argc != 7) {
    std::fprintf(stderr, "usage: rdzv_bench %s PORT RUN_ID N FIRST COUNT (internal)\n", kAgentGroupFlag);
    return 2;
  }
  raise_fd_limit();
  log::set_default_level(spdlog::level::warn);
  const auto port = static_cast<std::uint16_t>(std::stoi(argv[2]));
  GroupSpec spec{argv[3], std::stoi(argv[4]), std::stoi(argv[5]), std::stoi(argv[6])};
  AgentGroup group(spec, [port] { return connect_tcp(port); });
  std::printf("ready\n");
  std::fflush(stdout);
  char line[64];
  if (!std::fgets(line, sizeof line, stdin) || std::strncmp(line, "go", 2) != 0) return 1;
  group.release();
  const auto r = group.join();
  std::printf("%s\n", r.encode().c_str());
  std::fflush(stdout);
  if (!std::fgets(line, sizeof line, stdin)) return 0;  // the bench is gone: exit without closing the run
  group.shutdown();
  return r.failures ? 1 : 0;
}

// The rendezvous store: a ctstore process (the default), or a server thread in this process.
class BenchStore {
 public:
  BenchStore(bool as_process, const std::string& ctstore) {
    if (!as_process) {
      store::ServerOptions so;
      so.host = "127.0.0.1";
      server_ = std::make_unique<store::Server>(so);
      server_->start();
      port_ = server_->port();
      return;
    }
    process_ = std::make_unique<Child>(std::vector<std::string>{ctstore, "--host", "127.0.0.1", "--port", "0"});
    const auto line = process_->read_line();  // "ctstore listening on 127.0.0.1:PORT"
    const auto colon = line.rfind(':');
    if (line.rfind("ctstore listening on", 0) != 0 || colon == std::string::npos)
      throw std::runtime_error("rdzv_bench: unexpected first line from ctstore: " + line);
    port_ = static_cast<std::uint16_t>(std::stoi(line.substr(colon + 1)));
  }
  ~BenchStore() {
    if (process_) {
      ::kill(process_->pid(), SIGTERM);
      process_->finish(10);
    }
  }

  std::uint16_t port() const { return port_; }

  // Wire requests handled so far (every command, every connection).
  std::uint64_t requests() {
    std::uint64_t total = 0;
    if (server_) {
      for (const auto& [name, n] : server_->stats().ops) total += n;
      return total;
    }
    ::kill(process_->pid(), SIGUSR1);
    auto j = nlohmann::json::parse(process_->read_line());
    for (const auto& [name, n] : j.at("ops").items()) total += n.get<std::uint64_t>();
    return total;
  }
  // CPU seconds of the server so far (total: precise; user and system: from clock ticks), nullopt when it
  // shares this process with the agents.
  struct Cpu {
    double total = 0, user = 0, sys = 0;
  };
  std::optional<Cpu> cpu(bool agents_here) {
    if (process_) {
      const auto [user, sys] = process_->user_system_seconds();
      return Cpu{process_->cpu_seconds(), user, sys};
    }
    if (agents_here) return std::nullopt;
    rusage u{};
    ::getrusage(RUSAGE_SELF, &u);  // this process runs only the server (and waits on pipes)
    auto sec = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6; };
    return Cpu{sec(u.ru_utime) + sec(u.ru_stime), sec(u.ru_utime), sec(u.ru_stime)};
  }

 private:
  std::unique_ptr<store::Server> server_;
  std::unique_ptr<Child> process_;
  std::uint16_t port_ = 0;
};

Figure to_figure(const GroupResult& r, std::int64_t released_ns) {
  Figure f;
  f.seconds = static_cast<double>(r.last_end_ns - released_ns) * 1e-9;
  f.since_last_start = static_cast<double>(r.last_end_ns - r.last_start_ns) * 1e-9;
  f.first_done = static_cast<double>(r.first_end_ns - released_ns) * 1e-9;
  f.bytes = r.bytes;
  f.ops = r.ops;
  f.agents_cpu = r.cpu_s;
  f.agents_sys = r.sys_s;
  f.csw = r.csw;
  if (r.failures) throw std::runtime_error(fmt::format("{} of {} agents failed", r.failures, r.agents));
  return f;
}

// One round of n agents split over `procs` processes (0: threads of this process).
// The store and network counters of one round: snapshot at the release, differences into the round's Figure.
struct RoundProbe {
  explicit RoundProbe(BenchStore& bs) : bs_(bs) {}
  // Just before releasing the agents (after the connection set-up, whose retransmissions do not count).
  // agents_here: the agents are threads of this process (see BenchStore::cpu).
  void start(bool agents_here) {
    agents_here_ = agents_here;
    requests_ = bs_.requests();
    cpu_ = bs_.cpu(agents_here);
    retrans_ = retransmits_on(bs_.port());
    drops_ = backlog_drops();
    timeouts_ = tcp_timeouts();
    released_ = now_ns();
  }
  Figure finish(const GroupResult& total) {
    auto f = to_figure(total, released_);
    f.net = {backlog_drops() - drops_, tcp_timeouts() - timeouts_, retransmits_on(bs_.port()) - retrans_};
    f.requests = bs_.requests() - requests_;
    const auto cpu1 = bs_.cpu(agents_here_);
    if (cpu_ && cpu1) {
      // The precise total, split in the proportion of the sampled user and system ticks.
      f.server_cpu = cpu1->total - cpu_->total;
      const double user = cpu1->user - cpu_->user, sys = cpu1->sys - cpu_->sys;
      f.server_sys = user + sys > 0 ? f.server_cpu * sys / (user + sys) : 0;
    }
    return f;
  }

 private:
  BenchStore& bs_;
  bool agents_here_ = false;
  std::uint64_t requests_ = 0;
  std::optional<BenchStore::Cpu> cpu_;
  decltype(retransmits_on(0)) retrans_{};
  decltype(backlog_drops()) drops_{};
  decltype(tcp_timeouts()) timeouts_{};
  std::int64_t released_ = 0;
};

Figure run_c10d(int n, int procs, BenchStore& bs, const std::string& self, const std::string& run_id) {
  const int groups = std::min(procs, n);
  RoundProbe probe(bs);
  if (groups == 0) {
    AgentGroup group(GroupSpec{run_id, n, 0, n}, [&] { return connect_tcp(bs.port()); });
    probe.start(true);
    group.release();
    auto f = probe.finish(group.join());
    group.shutdown();
    return f;
  }
  std::vector<std::unique_ptr<Child>> children;
  for (int g = 0; g < groups; ++g) {
    const int first = static_cast<int>(static_cast<long>(n) * g / groups);
    const int next = static_cast<int>(static_cast<long>(n) * (g + 1) / groups);
    children.push_back(std::make_unique<Child>(
        std::vector<std::string>{self, kAgentGroupFlag, std::to_string(bs.port()), run_id, std::to_string(n),
                                 std::to_string(first), std::to_string(next - first)}));
  }
  for (auto& c : children)
    if (c->read_line() != "ready") throw std::runtime_error("rdzv_bench: an agent group did not start");
  GroupResult total;
  probe.start(false);
  for (auto& c : children) c->write_line("go");
  for (auto& c : children) total.merge(GroupResult::decode(c->read_line()));
  auto f = probe.finish(total);
  for (auto& c : children) c->write_line("stop");
  for (auto& c : children) c->finish(120);
  return f;
}

// The same handlers on etcd, made as create_handler() makes them (one run lease, a client per store
// connection), as threads of this process.
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
  AgentGroup group(GroupSpec{run_id, n, 0, n, "etcd"}, connect);
  const auto before = rdzv::etcd::wire_bytes();
  const auto released = now_ns();
  group.release();
  auto f = to_figure(group.join(), released);
  group.shutdown();
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
    if (std::sscanf(line, "torchrun N=%d seconds=%lf bytes=%llu ops=%llu", &n, &s, &b, &o) == 4) {
      Figure f;
      f.seconds = s;
      f.bytes = b;
      f.ops = o;
      out[n] = f;
    }
  }
  ::pclose(p);
  return out;
}

template <typename Run>
Figure median_of(int n, int repeats, Run run) {
  std::vector<Figure> runs;
  for (int r = 0; r < repeats; ++r) {
    runs.push_back(run(r));
    const auto& f = runs.back();
    std::fprintf(stderr,
                 "rdzv_bench: %d agents, run %d: %.4f s (machine-wide: %llu packets dropped, %llu TCP "
                 "timeouts; %llu retransmissions on the bench's connections)\n",
                 n, r + 1, f.seconds, static_cast<unsigned long long>(f.net.backlog_drops),
                 static_cast<unsigned long long>(f.net.timeouts), static_cast<unsigned long long>(f.net.retransmits));
  }
  std::sort(runs.begin(), runs.end(), [](auto& a, auto& b) { return a.seconds < b.seconds; });
  return runs[runs.size() / 2];
}

std::string self_exe() {
  char buf[4096];
  const auto n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw std::runtime_error("rdzv_bench: cannot read /proc/self/exe");
  return std::string(buf, static_cast<std::size_t>(n));
}

std::string cpu_text(double s) { return s < 0 ? "-" : fmt::format("{:.3f}", s); }

}  // namespace

int bench_main(int argc, char** argv);

int main(int argc, char** argv) {
  try {
    if (argc > 1 && std::strcmp(argv[1], kAgentGroupFlag) == 0) return agent_group_main(argc, argv);
    return bench_main(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rdzv_bench: %s\n", e.what());
    return 1;
  }
}

int bench_main(int argc, char** argv) {
  CLI::App app{"rdzv_bench: c10d rendezvous of N agents, ctrun vs torch's DynamicRendezvousHandler"};
  std::vector<int> sizes{4, 64, 256, 1024};
  std::vector<int> torch_sizes{4, 64, 128};
  int repeats = 3;
  int procs = 4;
  std::string store_kind = "process";
  const auto self = self_exe();
  std::string ctstore = self.substr(0, self.rfind('/') + 1) + "ctstore";
  std::string etcd_endpoints;
  app.add_option("--sizes", sizes, "agent counts for ctrun")->delimiter(',');
  app.add_option("--torch-sizes", torch_sizes, "agent counts for torch (it does not finish 256 here)")->delimiter(',');
  app.add_option("--repeats", repeats, "runs per size for ctrun (median reported)")->check(CLI::Range(1, 20));
  app.add_option("--procs", procs,
                 "processes the ctrun agents are split over (re-executions of this program); 0: threads of this "
                 "process")
      ->capture_default_str()
      ->check(CLI::Range(0, 256));
  app.add_option("--store", store_kind, "the TCPStore server: a ctstore process, or a thread of this process")
      ->capture_default_str()
      ->check(CLI::IsMember({"process", "thread"}));
  app.add_option("--ctstore", ctstore, "the ctstore binary for --store process")->capture_default_str();
  app.add_option("--etcd-endpoints", etcd_endpoints,
                 "also run the etcd backend on this cluster (host:port,...; see with_etcd.sh); its agents are threads "
                 "of this process");
  CLI11_PARSE(app, argc, argv);
  log::set_default_level(spdlog::level::warn);
  raise_fd_limit();
  ::signal(SIGPIPE, SIG_IGN);
  ::setenv("CTRUN_LOG_LEVEL", "warn", 0);  // ctstore's start/stop lines are noise here (a level given wins)

  BenchStore bs(store_kind == "process", ctstore);
  std::map<int, Figure> ours;
  int runs = 0;  // a run id per round: a finished round closes its run id
  for (int n : sizes)
    ours[n] =
        median_of(n, repeats, [&](int) { return run_c10d(n, procs, bs, self, fmt::format("b{}.{}", n, runs++)); });
  std::map<int, Figure> on_etcd;
  if (!etcd_endpoints.empty()) {
    const auto salt = std::chrono::steady_clock::now().time_since_epoch().count();  // fresh run ids per bench run
    for (int n : sizes)
      on_etcd[n] = median_of(n, repeats,
                             [&](int r) { return run_etcd(n, etcd_endpoints, fmt::format("e{}.{}.{}", n, r, salt)); });
  }
  auto theirs = run_torchrun(torch_sizes);

  fmt::print("ctrun c10d: store = {}, agents = {}; median of {}\n",
             store_kind == "process" ? "ctstore process" : "thread",
             procs == 0 ? std::string("threads of the bench process") : fmt::format("{} processes", procs), repeats);
  fmt::print("{:>6} | {:>8} {:>9} {:>8} {:>7} {:>7} | {:>10} {:>10} | {:>8}\n", "agents", "ctrun s", "us/agent",
             "B/agent", "ops/ag", "req/ag", "torchrun s", "B/agent", "speedup");
  for (auto& [n, f] : ours) {
    fmt::print("{:>6} | {:>8.4f} {:>9.1f} {:>8} {:>7.1f} {:>7.1f} |", n, f.seconds, f.seconds * 1e6 / n, f.bytes / n,
               static_cast<double>(f.ops) / n, static_cast<double>(f.requests) / n);
    if (auto it = theirs.find(n); it != theirs.end())
      fmt::print(" {:>10.3f} {:>10} | {:>7.0f}x\n", it->second.seconds, it->second.bytes / n,
                 it->second.seconds / std::max(f.seconds, 1e-9));
    else
      fmt::print(" {:>10} {:>10} | {:>8}\n", "-", "-", "-");
  }
  // Where the time went: CPU of the server and of the agents during the round, per wire request (user + system).
  fmt::print("\n{:>6} | {:>9} {:>9} | {:>17} {:>17} | {:>7} {:>9} {:>10} | {:>6} {:>5} {:>7}\n", "agents", "server s",
             "agents s", "server us/req u+s", "agents us/req u+s", "csw/ag", "lastst s", "1st done s", "drops", "RTOs",
             "retrans");
  for (auto& [n, f] : ours) {
    const double req = std::max<double>(1, static_cast<double>(f.requests));
    const auto split = [&](double total, double sys) {
      return total < 0 ? std::string("-") : fmt::format("{:.1f}+{:.1f}", (total - sys) * 1e6 / req, sys * 1e6 / req);
    };
    fmt::print("{:>6} | {:>9} {:>9.3f} | {:>17} {:>17} | {:>7.1f} {:>9.4f} {:>10.4f} | {:>6} {:>5} {:>7}\n", n,
               cpu_text(f.server_cpu), f.agents_cpu, split(f.server_cpu, f.server_sys),
               split(f.agents_cpu, f.agents_sys), static_cast<double>(f.csw) / n, f.since_last_start, f.first_done,
               f.net.backlog_drops, f.net.timeouts, f.net.retransmits);
  }
  for (auto& [n, f] : theirs)
    if (!ours.count(n)) fmt::print("{:>6} | torchrun only: {:.3f} s, {} B/agent\n", n, f.seconds, f.bytes / n);
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
