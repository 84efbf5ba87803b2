// The agent loop with a scripted rendezvous handler (in-process, real worker processes): a node waiting to join
// ends the round and starts a new one without using up --max-restarts, and the handler sees torchrun's calls.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "agent/agent.hpp"
#include "agent/config/launch_config_builder.hpp"

namespace ctrun::agent {
namespace {

// Two-node rounds where this agent is group rank 1; one node waits to join during the first round.
class ScriptedHandler final : public rdzv::Handler {
 public:
  int rounds = 0, waiting_polls = 0, shutdowns = 0, leaves = 0, barriers = 0;
  void set_worker_store_address(const std::string& host, std::uint16_t port) override {
    host_ = host;
    port_ = port;
  }
  rdzv::RoundInfo next_rendezvous() override {
    rdzv::RoundInfo info;
    info.round = static_cast<std::uint64_t>(rounds++);
    info.group_rank = 1;
    info.group_world_size = 2;
    info.base_global_rank = 2;
    info.global_world_size = 4;
    info.base_role_rank = 2;
    info.role_world_size = 4;
    info.master_addr = host_;
    info.master_port = port_;
    return info;
  }
  int num_nodes_waiting() override {
    ++waiting_polls;
    return rounds == 1 && waiting_polls >= 2 ? 1 : 0;
  }
  bool round_broken() override { return false; }
  std::string restart_reason() override { return "node X waits to join"; }
  bool exit_barrier(store::Duration) override {
    ++barriers;
    return true;
  }
  bool is_closed() override { return false; }
  void set_closed() override {}
  bool shutdown() override {
    ++shutdowns;
    return true;
  }
  void leave() override { ++leaves; }
  std::string run_id() const override { return "scripted"; }
  std::string backend() const override { return "scripted"; }
  bool use_agent_store() const override { return true; }

 private:
  std::string host_;
  std::uint16_t port_ = 0;
};

TEST(AgentLoop, WaitingNodeStartsANewRoundWithoutUsingRestarts) {
  std::string dir = ::testing::TempDir() + "/ctrun_agent_loop_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  LaunchConfig c;
  c.workers.nproc_per_node = 2;
  c.restarts.max_restarts = 0;
  c.restarts.monitor_interval = 0.05;
  c.workers.no_python = true;
  c.logs.dir = "/dev/null";
  c.shutdown.timeout = 5;
  c.script = std::string(CTRUN_WORKERS_DIR) + "/once_then_exit.sh";
  c.shutdown.signal_numbers = {};  // the test process keeps its own signal handling
  ::setenv("OUT_DIR", dir.c_str(), 1);
  auto handler = std::make_unique<ScriptedHandler>();
  ScriptedHandler* h = handler.get();
  Agent agent(c, process_env(), std::move(handler));
  EXPECT_EQ(agent.run(), 0);
  EXPECT_EQ(h->rounds, 2);
  EXPECT_EQ(h->barriers, 1);
  EXPECT_EQ(h->shutdowns, 1);
  EXPECT_EQ(h->leaves, 0);
  for (int r = 0; r < 2; ++r) {
    std::ifstream in(dir + "/starts_" + std::to_string(r));
    std::stringstream text;
    text << in.rdbuf();
    // Both rounds: restart count 0, global rank = base 2 + local rank, world size 4.
    std::string line = "0 " + std::to_string(2 + r) + " 4\n";
    EXPECT_EQ(text.str(), line + line);
  }
  std::filesystem::remove_all(dir);
}

// Agent::fail() (the hook for failures of the agent itself) from another thread: the workers are stopped, the
// round is left (not closed), run() returns 1.
TEST(AgentLoop, FailFromAnotherThreadStopsTheJob) {
  std::string dir = ::testing::TempDir() + "/ctrun_agent_fail_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  LaunchConfig c;
  c.workers.nproc_per_node = 2;
  c.restarts.monitor_interval = 30;  // no membership poll during the test: only fail() ends the round
  c.workers.no_python = true;
  c.logs.dir = "/dev/null";
  c.shutdown.timeout = 5;
  c.script = std::string(CTRUN_WORKERS_DIR) + "/wait_term.sh";
  c.shutdown.signal_numbers = {};
  ::setenv("OUT_DIR", dir.c_str(), 1);
  auto handler = std::make_unique<ScriptedHandler>();
  ScriptedHandler* h = handler.get();
  Agent agent(c, process_env(), std::move(handler));
  std::thread failer([&] {
    for (int i = 0; i < 500 && !std::filesystem::exists(dir + "/pid_1"); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    agent.fail("the embedded store's server stopped (test)");
  });
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(agent.run(), 1);
  failer.join();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(20));
  for (int r = 0; r < 2; ++r) {
    std::ifstream in(dir + "/got_" + std::to_string(r));
    std::string got;
    std::getline(in, got);
    EXPECT_EQ(got, "TERM") << "rank " << r;
  }
  EXPECT_EQ(h->leaves, 1);
  EXPECT_EQ(h->shutdowns, 0);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ctrun::agent
