#include "apps/bench/scale_bench/harness.hpp"

#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace ctrun::scale_bench {

std::string self_exe() {
  char buf[4096];
  const auto n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw std::runtime_error("scale_bench: cannot read /proc/self/exe");
  return std::string(buf, static_cast<std::size_t>(n));
}

// ---- the master ----

Master::Master(const std::string& ctstore) {
  process_ = std::make_unique<Child>(std::vector<std::string>{ctstore, "--host", "127.0.0.1", "--port", "0"});
  const auto line = process_->read_line();  // "ctstore listening on 127.0.0.1:PORT"
  const auto colon = line.rfind(':');
  if (line.rfind("ctstore listening on", 0) != 0 || colon == std::string::npos)
    throw std::runtime_error("scale_bench: unexpected first line from ctstore: " + line);
  port_ = static_cast<std::uint16_t>(std::stoi(line.substr(colon + 1)));
}

Master::~Master() {
  if (!process_) return;
  ::kill(process_->pid(), SIGTERM);
  process_->finish(10);
}

MasterSample Master::sample() {
  MasterSample s;
  ::kill(process_->pid(), SIGUSR1);
  auto j = nlohmann::json::parse(process_->read_line());
  s.at_ns = now_ns();
  for (const auto& [name, n] : j.at("ops").items()) s.requests += n.get<std::uint64_t>();
  if (j.at("ops").contains("ON_SILENCE")) s.silence_watches = j.at("ops").at("ON_SILENCE").get<std::uint64_t>();
  s.connections = j.at("connections_open").get<std::uint64_t>();
  s.refused = j.at("connections_rejected").get<std::uint64_t>();
  s.bytes = j.at("bytes_in").get<std::uint64_t>() + j.at("bytes_out").get<std::uint64_t>();
  s.cpu_s = process_->cpu_seconds();
  return s;
}

// ---- the nodes ----

Fleet::Fleet(const Options& o) : options_(o) {
  const int procs = std::max(1, (o.nodes + o.per_process - 1) / o.per_process);
  for (int g = 0; g < procs; ++g) {
    const int first = static_cast<int>(static_cast<long>(o.nodes) * g / procs);
    const int next = static_cast<int>(static_cast<long>(o.nodes) * (g + 1) / procs);
    groups_.push_back(std::make_unique<Child>(
        std::vector<std::string>{o.self, "--agent-group", std::to_string(o.port), o.run_id, std::to_string(o.min_nodes),
                                 std::to_string(o.max_nodes), std::to_string(o.first + first),
                                 std::to_string(next - first), std::to_string(o.threads)}));
  }
  for (auto& g : groups_) {
    const auto line = g->read_line();
    if (line.rfind("ready", 0) != 0)
      throw std::runtime_error(fmt::format("scale_bench: an agent group (pid {}) did not start: {}", g->pid(), line));
  }
}

Fleet::~Fleet() = default;

void Fleet::send(const std::string& command) {
  for (auto& g : groups_) g->write_line(command);
}

JoinResult Fleet::collect() {
  JoinResult total;
  for (auto& g : groups_) total.merge(JoinResult::decode(g->read_line()));
  return total;
}

JoinResult Fleet::command(const std::string& command) {
  send(command);
  return collect();
}

void Fleet::quit() {
  for (auto& g : groups_) g->write_line("quit");
  for (auto& g : groups_) g->finish(120);
  groups_.clear();
}

std::vector<pid_t> Fleet::pids() const {
  std::vector<pid_t> out;
  for (const auto& g : groups_) out.push_back(g->pid());
  return out;
}

// ---- the network ----

namespace {

std::uint64_t netstat_field(const std::string& field) {
  std::ifstream netstat("/proc/net/netstat");
  std::string names, values;
  while (std::getline(netstat, names) && std::getline(netstat, values)) {
    if (names.rfind("TcpExt:", 0) != 0) continue;
    std::istringstream n(names), v(values);
    std::string name, value;
    while (n >> name && v >> value)
      if (name == field) return std::stoull(value);
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

}  // namespace

NetSample net_sample(std::uint16_t port) {
  return {backlog_drops(), netstat_field("TCPTimeouts"), retransmits_on(port), netstat_field("ListenDrops")};
}

}  // namespace ctrun::scale_bench
