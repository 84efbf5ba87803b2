// Worker env and command, as torchrun computes them (local_elastic_agent.py).
#include <gtest/gtest.h>

#include "agent/launch/local_rendezvous.hpp"
#include "agent/launch/worker_invocation.hpp"
#include "tests/agent/env_of.hpp"

namespace ctrun::agent {
namespace {

using test::env_of;

TEST(WorkerEnv, SingleNodeStandalone) {
  LaunchConfig c;
  c.workers.nproc_per_node = 4;
  c.restarts.max_restarts = 2;
  c.workers.role = "trainer";
  LocalRendezvous rdzv("run1", "c10d", 4);
  rdzv.set_worker_store_address("127.0.0.1", 4242);
  auto round = rdzv.next_rendezvous();
  WorkerEnvInput in{&c, &round, "run1", true, 3, 1, "/logs/attempt_1/3/error.json"};
  auto env = worker_env_overrides(in, env_of({}));
  std::map<std::string, std::string> expected = {
      {"LOCAL_RANK", "3"},
      {"RANK", "3"},
      {"GROUP_RANK", "0"},
      {"ROLE_RANK", "3"},
      {"ROLE_NAME", "trainer"},
      {"LOCAL_WORLD_SIZE", "4"},
      {"WORLD_SIZE", "4"},
      {"GROUP_WORLD_SIZE", "1"},
      {"ROLE_WORLD_SIZE", "4"},
      {"MASTER_ADDR", "127.0.0.1"},
      {"MASTER_PORT", "4242"},
      {"TORCHELASTIC_RESTART_COUNT", "1"},
      {"TORCHELASTIC_MAX_RESTARTS", "2"},
      {"TORCHELASTIC_RUN_ID", "run1"},
      {"TORCHELASTIC_USE_AGENT_STORE", "True"},
      {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"},
      {"NCCL_ASYNC_ERROR_HANDLING", "1"},
      {"TORCHELASTIC_ERROR_FILE", "/logs/attempt_1/3/error.json"},
      {"TORCH_NCCL_TRACE_BUFFER_SIZE", "2000"},
      {"TORCH_FR_BUFFER_SIZE", "2000"},
      {"TORCH_NCCL_DUMP_ON_TIMEOUT", "1"},
      {"TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "/logs/attempt_1/3/nccl_trace_rank_"},
      {"TORCH_FR_DUMP_TEMP_FILE", "/logs/attempt_1/3/nccl_trace_rank_"},
      {"TORCHELASTIC_SIGNALS_TO_HANDLE", "SIGTERM,SIGINT,SIGHUP,SIGQUIT"}};
  env.erase("PYTHONPATH");  // depends on where the test runs: see TorchModuleOnPythonPath
  EXPECT_EQ(env, expected);
}

// A job of one worker on one node (the worker store at 127.0.0.1:4242).
LaunchConfig one_worker_config() {
  LaunchConfig c;
  c.workers.nproc_per_node = 1;
  return c;
}
rdzv::RoundInfo one_worker_round() {
  LocalRendezvous rdzv("run1", "c10d", 1);
  rdzv.set_worker_store_address("127.0.0.1", 4242);
  return rdzv.next_rendezvous();
}

// torch's NCCL Flight Recorder dumps into the rank's log dir, unless the user set either name of a variable.
TEST(WorkerEnv, FlightRecorderLeavesTheUsersSettingsAlone) {
  const LaunchConfig c = one_worker_config();
  const auto round = one_worker_round();
  WorkerEnvInput in{&c, &round, "run1", true, 0, 0, "/logs/attempt_0/0/error.json"};
  auto env = worker_env_overrides(in, env_of({{"TORCH_FR_BUFFER_SIZE", "0"}}));
  EXPECT_EQ(env.count("TORCH_FR_BUFFER_SIZE"), 0u);
  EXPECT_EQ(env.count("TORCH_NCCL_TRACE_BUFFER_SIZE"), 0u);
  EXPECT_EQ(env["TORCH_FR_DUMP_TEMP_FILE"], "/logs/attempt_0/0/nccl_trace_rank_");
  in.error_file = "";
  EXPECT_EQ(worker_env_overrides(in, env_of({})).count("TORCH_NCCL_DUMP_ON_TIMEOUT"), 0u);
}

TEST(WorkerEnv, TorchModuleOnPythonPath) {
  const LaunchConfig c = one_worker_config();
  const auto round = one_worker_round();
  WorkerEnvInput in{&c, &round, "run1", true, 0, 0, "/e.json"};
  auto env = worker_env_overrides(in, env_of({{"PYTHONPATH", "/mine"}}));
  auto dir = torch_module_dir();
  if (!dir) GTEST_SKIP() << "ctrun_torch not built next to this binary (no torch headers?)";
  EXPECT_EQ(env["PYTHONPATH"], *dir + ":/mine");  // ours first (one directory in a build tree), the user's kept
  EXPECT_EQ(python_dirs(), *dir);
}

TEST(WorkerEnv, MultiNodeRoundFormulas) {
  LaunchConfig c;
  c.workers.nproc_per_node = 2;
  rdzv::RoundInfo round;
  round.group_rank = 1;
  round.group_world_size = 3;
  round.base_global_rank = 2;
  round.global_world_size = 6;
  round.base_role_rank = 2;
  round.role_world_size = 6;
  round.master_addr = "10.0.0.1";
  round.master_port = 1;
  WorkerEnvInput in{&c, &round, "r", false, 1, 0, ""};
  auto env = worker_env_overrides(in, env_of({{"TORCH_NCCL_ASYNC_ERROR_HANDLING", "3"}}));
  EXPECT_EQ(env["RANK"], "3");
  EXPECT_EQ(env["GROUP_RANK"], "1");
  EXPECT_EQ(env["WORLD_SIZE"], "6");
  EXPECT_EQ(env["GROUP_WORLD_SIZE"], "3");
  EXPECT_EQ(env["TORCHELASTIC_USE_AGENT_STORE"], "False");
  EXPECT_EQ(env["TORCH_NCCL_ASYNC_ERROR_HANDLING"], "3");  // inherited value wins over the default
}

TEST(WorkerEnv, VirtualLocalRank) {
  LaunchConfig c;
  c.workers.nproc_per_node = 2;
  c.workers.virtual_local_rank = true;
  LocalRendezvous rdzv("r", "static", 2);
  auto round = rdzv.next_rendezvous();
  WorkerEnvInput in{&c, &round, "r", true, 1, 0, ""};
  auto env = worker_env_overrides(in, env_of({{"CUDA_VISIBLE_DEVICES", "4,6"}}));
  EXPECT_EQ(env["LOCAL_RANK"], "0");
  EXPECT_EQ(env["RANK"], "1");
  EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], "6");
  EXPECT_EQ(worker_env_overrides(in, env_of({}))["CUDA_VISIBLE_DEVICES"], "1");
  EXPECT_THROW(worker_env_overrides(in, env_of({{"CUDA_VISIBLE_DEVICES", "4"}})), std::invalid_argument);
}

TEST(WorkerCommand, PythonModuleBinaryAndMacro) {
  LaunchConfig c;
  c.script = "train.py";
  c.script_args = {"--rank=${local_rank}", "x"};
  EXPECT_EQ(worker_argv(c, 2, env_of({})), (std::vector<std::string>{"python3", "-u", "train.py", "--rank=2", "x"}));
  EXPECT_EQ(worker_argv(c, 0, env_of({{"PYTHON_EXEC", "/opt/py"}}))[0], "/opt/py");
  c.workers.module = true;
  c.script = "pkg.main";
  EXPECT_EQ(worker_argv(c, 0, env_of({}))[2], "-m");
  c.workers.module = false;
  c.workers.no_python = true;
  c.script = "/bin/true";
  EXPECT_EQ(worker_argv(c, 1, env_of({})), (std::vector<std::string>{"/bin/true", "--rank=1", "x"}));
}

TEST(WorkerCommand, MergeEnvironmentOverrides) {
  const char* parent_raw[] = {"A=1", "RANK=9", "PATH=/bin", nullptr};
  auto merged = merge_environment(const_cast<char**>(parent_raw), {{"RANK", "0"}, {"B", "2"}});
  std::sort(merged.begin(), merged.end());
  EXPECT_EQ(merged, (std::vector<std::string>{"A=1", "B=2", "PATH=/bin", "RANK=0"}));
}

}  // namespace
}  // namespace ctrun::agent
