#pragma once
// The elastic agent of one node: hosts the workers' store, takes a round from the rendezvous handler, spawns
// the worker group, watches it through child-exit events (no polling), forwards signals, restarts the group on
// failure with a fresh store keyspace, and reports the failure summary. Asio stays in agent.cpp.

#include <memory>
#include <string>

#include "agent/base/command_line.hpp"
#include "agent/base/launch_config.hpp"
#include "rendezvous/handler.hpp"

namespace ctrun::agent {

class Agent {
 public:
  // nproc_per_node must already be resolved (agent/config/nproc.hpp).
  Agent(LaunchConfig config, EnvLookup env);
  // With a given rendezvous handler instead of the one the config asks for (tests, embedding).
  Agent(LaunchConfig config, EnvLookup env, std::unique_ptr<rdzv::Handler> handler);
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // Runs the job to the end; returns ctrun's exit code: 0 success, 1 failure (torchrun's), or with
  // --propagate-exit-code the root cause's code (128+N for signal N).
  int run();

  // A failure of the agent itself (e.g. its embedded worker store's server died): callable from any thread while
  // run() runs. The agent stops its workers, leaves the round and run() returns 1, as on a death signal.
  void fail(std::string why);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ctrun::agent
