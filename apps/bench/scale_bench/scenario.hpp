#pragma once
// One scale_bench scenario per file (scenarios/): what a job of N simulated nodes costs its master, one table row
// each. A scenario runs on a Job (the master and the nodes' processes, kept from one scenario to the next: the
// order in scenarios() is the story of the job) and returns its rows; the bench prints every row side by side.
// To add one: a file in scenarios/, declared below, listed in scenarios() (scenario.cpp).

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "apps/bench/scale_bench/harness.hpp"

namespace ctrun::scale_bench {

struct BenchOptions {
  std::vector<int> sizes;
  int repeats = 1;            // rounds per size (median): the round scenario only
  int per_process = 4096;     // nodes per agent group process (each holds one connection per node)
  int threads = 8;            // runner threads per agent group process
  double idle_window_s = 15;  // the idle scenario's measurement (three heartbeat intervals)
  std::string self, ctstore;
  std::vector<int> torch_sizes;  // torchrun's own rendezvous at these sizes (a peer, in the same run)
  std::string etcd_endpoints;    // the etcd backend too, at these endpoints (a peer, in the same run)
  std::vector<int> storm_sizes;  // the workers' init storm at these node counts (scenarios/init_storm.cpp)
  int storm_ranks = 8;           // ranks per node in the storm
  std::vector<std::string> storm_modes{"relay", "direct", "torch26"};
  std::string torch26_launcher;  // runs a script with torch 2.6's python3 (tests/torch2/chroot_python.sh)
};

// One row of the table: what a scenario cost the master.
struct Row {
  std::string scenario;
  int nodes = 0;
  std::optional<double> seconds;   // how long it took, where it is a thing that ends
  std::uint64_t connections = 0;   // the master's open connections at its end
  std::uint64_t requests = 0;      // wire requests the master handled during it
  std::uint64_t bytes = 0;         // bytes the master read and wrote during it
  std::optional<double> cpu_s;     // CPU seconds of the master during it
  std::optional<double> window_s;  // a steady state measured over this long: requests and CPU per second
  NetSample net;                   // packet loss on the machine during it
  std::string note;
};

// A job: the master, the members' processes, a victim (one member in a process of its own, for kill -9) and a spare
// (one node beyond MAX, in a process of its own).
struct Job {
  const BenchOptions& options;
  int nodes = 0;
  std::string run_id;
  Master master;
  std::unique_ptr<Fleet> members;  // nodes 0 .. N-2
  std::unique_ptr<Fleet> victim;   // node N-1
  std::unique_ptr<Fleet> spare;    // node N, started by the scenario that needs it

  Job(const BenchOptions& options, int nodes, const std::string& run_id);
  Fleet::Options fleet_options(int first, int count) const;
};

// The master's sample once the job's background traffic has passed: the tail of the scenario before (the next
// round's registrations, its late looks at the lost log) and a burst of the grid-aligned heartbeats are not an
// exchange's cost. Waits for a 250 ms window with fewer than max(4, N/100) requests, at most 5 s (then the row
// carries whatever was in flight: its note says so through `quiet`).
MasterSample quiet_sample(Job& job, bool* quiet = nullptr);

// An exchange on every node of the job's current round (the members' and the spare's, `command` to the agent
// groups): measured from a quiet master (quiet_sample) to the last node's end. The row's seconds span the nodes'
// calls; its note is empty, or the caveat that the master was not quiet before it, for the scenario's own note to
// end with. Throws when a node failed it.
struct Exchange {
  Row row;
  JoinResult nodes;  // what the nodes did: their calls, bytes, group rank 0's part
};
Exchange measure_exchange(Job& job, const std::string& command, const std::string& name);

// The cost of what happened between two samples, as a row.
Row measured(const std::string& scenario, int nodes, const MasterSample& before, const MasterSample& after,
             const NetSample& net_before, const NetSample& net_after);

// Scenarios on a job, in the order they run.
struct Scenario {
  const char* name;
  std::function<std::vector<Row>(Job&)> run;
};
std::vector<Scenario> scenarios();

std::vector<Row> round_scenario(Job& job);       // scenarios/round.cpp
std::vector<Row> idle_scenario(Job& job);        // scenarios/idle.cpp
std::vector<Row> kill_scenario(Job& job);        // scenarios/kill.cpp
std::vector<Row> checkpoint_scenario(Job& job);  // scenarios/checkpoint.cpp
std::vector<Row> status_scenario(Job& job);      // scenarios/status.cpp
std::vector<Row> hang_scenario(Job& job);        // scenarios/hang.cpp

// Scenarios on masters of their own, at their own sizes (peers, and the init storm), in the order they run.
struct Standalone {
  const char* name;
  std::function<std::vector<Row>(const BenchOptions&)> run;
};
std::vector<Standalone> standalone_scenarios();

std::vector<Row> init_storm(const BenchOptions& options);       // scenarios/init_storm.cpp
std::vector<Row> torchrun_rounds(const BenchOptions& options);  // scenarios/torchrun_round.cpp
std::vector<Row> etcd_rounds(const BenchOptions& options);      // scenarios/etcd_round.cpp

}  // namespace ctrun::scale_bench
