#pragma once
// A share of rdzv_bench's N agents living in one process: each agent is a C10dHandler (its own two store
// connections, its heartbeat thread) and a thread that calls next_rendezvous() once. Everything that is not the
// round itself happens before the clock starts: the handlers connect, the threads start and park on a futex
// (std::atomic::wait, not a spin: parked threads take no CPU from the agents already running). release() wakes
// them all at once; join() reports when they started and ended (CLOCK_MONOTONIC, comparable across processes)
// and what the process spent on CPU meanwhile.

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "rendezvous/c10d_handler.hpp"
#include "store/counting_store.hpp"

namespace ctrun::rdzv_bench {

// What one group reports; times are steady_clock nanoseconds since its epoch (CLOCK_MONOTONIC on Linux).
struct GroupResult {
  std::int64_t first_start_ns = 0;
  std::int64_t last_start_ns = 0;
  std::int64_t first_end_ns = 0;  // the first agent holding its round: about when the round was published
  std::int64_t last_end_ns = 0;
  std::uint64_t agents = 0;
  std::uint64_t failures = 0;
  std::uint64_t ops = 0;    // Store-interface operations of the round (the counted connection of each agent)
  std::uint64_t bytes = 0;  // their keys + values, both directions
  double cpu_s = 0;         // user + system CPU of the whole process from release() to join()'s return
  double sys_s = 0;         // of which system
  std::uint64_t csw = 0;    // context switches (voluntary + involuntary) meanwhile

  void merge(const GroupResult& o);
  std::string encode() const;  // one line, for a child process to report on its stdout
  static GroupResult decode(const std::string& line);
};

struct GroupSpec {
  std::string run_id;
  int total = 0;  // N: min = max nodes of the round
  int first = 0;  // agents first .. first+count-1 of N live here (their node names are node<i>)
  int count = 0;
  std::string backend = "c10d";
};

class AgentGroup {
 public:
  using Connect = std::function<std::shared_ptr<store::Store>()>;
  // Connects every handler and parks every agent thread; returns when all are parked.
  AgentGroup(const GroupSpec& spec, const Connect& connect);
  ~AgentGroup();
  AgentGroup(const AgentGroup&) = delete;
  AgentGroup& operator=(const AgentGroup&) = delete;

  void release();      // every parked agent starts next_rendezvous() now
  GroupResult join();  // waits for every agent to hold its round (or fail)
  void shutdown();     // closes the run and stops the heartbeats (after the measurement)

 private:
  GroupSpec spec_;
  std::shared_ptr<store::StoreTraffic> traffic_;
  std::vector<std::unique_ptr<rdzv::C10dHandler>> handlers_;
  std::vector<std::thread> threads_;
  std::vector<std::int64_t> starts_, ends_;
  std::atomic<int> parked_{0};
  std::atomic<bool> go_{false};
  std::atomic<std::uint64_t> failures_{0};
  double cpu_at_release_ = 0;
  double sys_at_release_ = 0;
  std::uint64_t csw_at_release_ = 0;
};

std::int64_t now_ns();

}  // namespace ctrun::rdzv_bench
