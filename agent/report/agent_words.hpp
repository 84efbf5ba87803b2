#pragma once
// What the agent says at the turns of its run, worded in one place: its start, each round formed, a restart
// (torchrun's "Worker group FAILED. N/M attempts left" first) and a job stopped for making no progress; the log lines
// and the event log's entries.

#include <cstdint>
#include <optional>
#include <string>

#include "agent/base/command_line.hpp"
#include "agent/base/launch_config.hpp"
#include "agent/policy/progress_policy.hpp"
#include "rendezvous/handler.hpp"

namespace ctrun::agent {

class EventLog;

// The agent starts: its run id, flags, rendezvous and workers' store (`store`: "host:port", "" when node rank 0's).
void say_start(const LaunchConfig& config, const EnvLookup& env, EventLog& events, const rdzv::Handler& handler,
               const std::string& master_addr, std::uint16_t master_port);

// A round formed (several nodes: one warning-level line, as the wait for it was one).
void say_round(const LaunchConfig& config, EventLog& events, const std::string& run_id, const rdzv::RoundInfo& round);

// A restart is counted: `remaining` restarts were left before it, `count` is the new TORCHELASTIC_RESTART_COUNT;
// `collectives` for the progress baseline, `resume`: the keeper's resume line, when it has one.
void say_restart(const LaunchConfig& config, EventLog& events, int remaining_before, int count,
                 const ProgressCount& progress, std::uint64_t collectives, const std::optional<std::string>& resume);

// The job stops although it could restart (--stop-without-progress): why, as its last words; returns the exit code
// a requeue script tests (kNoProgressExitCode).
int say_no_progress(const LaunchConfig& config, EventLog& events, const ProgressCount& progress,
                    std::uint64_t collectives, std::optional<std::int64_t> resume_step);

}  // namespace ctrun::agent
