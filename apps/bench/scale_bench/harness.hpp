#pragma once
// The processes of one scale_bench job: the master (a ctstore process, the job's one store) and the simulated
// nodes (agent groups: this program re-executed with --agent-group, each within the descriptors one process may
// hold), and what the bench reads of them. Scenarios (scenario.hpp) drive them.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "apps/bench/scale_bench/agent_group.hpp"
#include "apps/bench/scale_bench/child.hpp"

namespace ctrun::scale_bench {

// What the master has done so far; differences of two samples are a scenario's cost.
struct MasterSample {
  std::int64_t at_ns = 0;
  std::uint64_t requests = 0;     // wire requests handled (every command, every connection)
  std::uint64_t connections = 0;  // open now
  std::uint64_t refused = 0;      // connections refused (cap, descriptors, bad input, ...)
  double cpu_s = 0;               // CPU seconds of the whole process (user + system)
  std::uint64_t bytes = 0;        // bytes read from and written to clients
  std::uint64_t silence_watches = 0;  // ON_SILENCE requests: a member's liveness (un)registering for a round
};

// The ctstore process.
class Master {
 public:
  explicit Master(const std::string& ctstore);
  ~Master();
  std::uint16_t port() const { return port_; }
  MasterSample sample();

 private:
  std::unique_ptr<Child> process_;
  std::uint16_t port_ = 0;
};

// Agent group processes holding `nodes` simulated nodes of run `run_id` (MIN..MAX), at most `per_process` each.
class Fleet {
 public:
  struct Options {
    std::string self;  // this program, re-executed with --agent-group
    std::uint16_t port = 0;
    std::string run_id;
    int min_nodes = 1, max_nodes = 1;
    int first = 0;  // node index of the first node
    int nodes = 0;
    int per_process = 4096;
    int threads = 8;
  };
  // Starts the processes and waits until every node is connected; throws with a group's error.
  explicit Fleet(const Options& options);
  ~Fleet();

  // Sends `command` ("join", "follow") to every group (all first, so that they start together) and merges
  // their results.
  JoinResult command(const std::string& command);
  // Starts `command` on every group without waiting; collect() reads the results.
  void send(const std::string& command);
  JoinResult collect();
  // Closes the run (every node's shutdown) and ends the processes.
  void quit();
  std::vector<pid_t> pids() const;
  int nodes() const { return options_.nodes; }

 private:
  Options options_;
  std::vector<std::unique_ptr<Child>> groups_;
};

// Packet loss on this machine during a scenario: loopback drops when a CPU's input backlog overflows
// (/proc/net/softnet_stat) and TCP retransmission timeouts (/proc/net/netstat TCPTimeouts): on loopback each costs its
// connection >= 200 ms; and the retransmissions on the master's connections (both ends, `ss -ti`).
struct NetSample {
  std::uint64_t backlog_drops = 0;
  std::uint64_t timeouts = 0;
  std::uint64_t retransmits = 0;
  std::uint64_t syn_drops = 0;  // ListenDrops: a full accept queue dropped a SYN (it is retried after >= 1 s)
};
NetSample net_sample(std::uint16_t port);

std::string self_exe();

}  // namespace ctrun::scale_bench
