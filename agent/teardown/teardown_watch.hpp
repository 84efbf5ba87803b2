#pragma once
// The agent's side of "a finished program is a finished job" (issue 42) for one worker group, beside its loop:
// each attempt's exit-record file (exit_record.hpp) and the workers' variables naming it, the count of a worker's
// exit from its record (verdict.hpp), and the bound on teardown: a worker whose program ended --shutdown-timeout
// ago and that still runs is handed back to be killed and counted as failed. Runs on the agent's loop.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "agent/teardown/exit_record.hpp"
#include "agent/teardown/verdict.hpp"

namespace boost::asio {
class io_context;
}

namespace ctrun::agent::teardown {

class TeardownWatch {
 public:
  struct Running {
    int local_rank = 0;
    int pid = 0;
  };
  // enabled: false with --fail-on-teardown-crash (no file, no variable: every exit counts as it is, as torchrun).
  // bound_s: --shutdown-timeout. root: where each attempt's file is made (/dev/shm).
  TeardownWatch(boost::asio::io_context& io, bool enabled, double bound_s, std::string root);
  ~TeardownWatch();
  TeardownWatch(const TeardownWatch&) = delete;
  TeardownWatch& operator=(const TeardownWatch&) = delete;

  // Before an attempt's workers start: its file (when it cannot be made: said once, and off for the attempt).
  void begin_attempt(std::uint64_t attempt, int local_ranks);
  // The variables of the worker of `local_rank` (none when off).
  void add_env(int local_rank, std::map<std::string, std::string>& env) const;
  // How the exit of the worker of `local_rank` counts, from what it recorded.
  ExitJudgement judge(int local_rank, int pid, int exitcode) const;
  // While any of `running()` runs: each whose program ended more than bound_s ago goes to `overdue` once, with
  // what it recorded and how long ago its program ended.
  using Overdue = std::function<void(const Running& worker, const ExitRecord& record, double ended_s)>;
  void watch(std::function<std::vector<Running>()> running, Overdue overdue);
  // Every worker of the attempt exited: the file goes.
  void end_attempt();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ctrun::agent::teardown
