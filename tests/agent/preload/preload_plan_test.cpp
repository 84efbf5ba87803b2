#include "agent/preload/preload_plan.hpp"

#include <algorithm>

#include <gtest/gtest.h>

namespace ctrun::agent::preload {
namespace {

EnvLookup lookup(std::map<std::string, std::string> vars) {
  return [vars](const std::string& k) -> std::optional<std::string> {
    auto it = vars.find(k);
    return it == vars.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
}

bool has(const std::vector<std::string>& env, const std::string& entry) {
  return std::find(env.begin(), env.end(), entry) != env.end();
}

TEST(PreloadPlan, TheWarmProcessGetsTheJobWideVariablesOfEveryRank) {
  LaunchConfig c;
  c.workers.nproc_per_node = 4;
  c.script = "train.py";
  c.script_args = {"--rank", "${local_rank}"};
  char a[] = "PATH=/usr/bin";
  char b[] = "OMP_NUM_THREADS=1";
  char* parent[] = {a, b, nullptr};
  auto plan = plan_warm_process(c, {"torch"}, lookup({{"PYTHON_EXEC", "/usr/bin/python3"}}), parent);
  ASSERT_TRUE(std::holds_alternative<WarmOptions>(plan)) << std::get<std::string>(plan);
  const auto& o = std::get<WarmOptions>(plan);
  EXPECT_EQ(o.worker_argv, (std::vector<std::string>{"/usr/bin/python3", "-u", "train.py", "--rank", "0"}));
  EXPECT_EQ(o.modules, std::vector<std::string>{"torch"});
  EXPECT_TRUE(has(o.env, "PATH=/usr/bin"));
  EXPECT_TRUE(has(o.env, "OMP_NUM_THREADS=1"));
  EXPECT_TRUE(has(o.env, "TORCH_NCCL_ASYNC_ERROR_HANDLING=1"));  // set by ctrun for every rank
  for (const auto& e : o.env) {
    EXPECT_FALSE(e.starts_with("RANK=") || e.starts_with("LOCAL_RANK=") || e.starts_with("TORCHELASTIC_")) << e;
  }
}

TEST(PreloadPlan, NoPythonWorkersAreNotPreloaded) {
  LaunchConfig c;
  c.workers.no_python = true;
  c.script = "/bin/true";
  char* parent[] = {nullptr};
  auto plan = plan_warm_process(c, {"torch"}, lookup({}), parent);
  ASSERT_TRUE(std::holds_alternative<std::string>(plan));
  EXPECT_NE(std::get<std::string>(plan).find("--no-python"), std::string::npos);
  c.workers.run_path = true;  // --run-path runs the file with python: preloadable
  EXPECT_TRUE(std::holds_alternative<WarmOptions>(plan_warm_process(c, {"torch"}, lookup({}), parent)));
}

}  // namespace
}  // namespace ctrun::agent::preload
