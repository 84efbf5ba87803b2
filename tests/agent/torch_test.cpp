// Real PyTorch (Debian's torch 1.13 at CTRUN_TORCH_PYTHON) under ctrun: the demo all_reduce, a restart that
// the agent's store serves with a fresh keyspace, and an @record worker's traceback in the summary.
#include <gtest/gtest.h>

#include <unistd.h>

#include "run_ctrun.hpp"

namespace ctrun::agent::test {
namespace {

bool have_torch() {
  std::string cmd = std::string(CTRUN_TORCH_PYTHON) + " -c 'import torch' >/dev/null 2>&1";
  return std::string(CTRUN_TORCH_PYTHON).size() > 0 && std::system(cmd.c_str()) == 0;
}

std::map<std::string, std::string> torch_env() {
  return {{"PYTHON_EXEC", CTRUN_TORCH_PYTHON}, {"GLOO_SOCKET_IFNAME", "lo"}};
}

TEST(Torch, StandaloneAllReduceGivesTheRightSumOnEveryRank) {
  if (!have_torch()) GTEST_SKIP() << "no PyTorch at " << CTRUN_TORCH_PYTHON;
  RunResult r =
      run_ctrun({"--standalone", "--nproc-per-node=4", std::string(CTRUN_SOURCE_DIR) + "/examples/torch_allreduce.py"},
                torch_env(), std::chrono::seconds(120));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_NE(r.out.find("rank " + std::to_string(rank) + "/4 (local_rank " + std::to_string(rank) +
                         "): all_reduce sum = 10 ok"),
              std::string::npos)
        << r.out;
  }
}

TEST(Torch, FailsOnAttempt0SucceedsOnAttempt1WithFreshStore) {
  if (!have_torch()) GTEST_SKIP() << "no PyTorch at " << CTRUN_TORCH_PYTHON;
  RunResult r =
      run_ctrun({"--standalone", "--nproc-per-node=2", "--max-restarts", "1", workers_dir() + "/torch_restart.py"},
                torch_env(), std::chrono::seconds(120));
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("attempt 0 rank 0: failing on purpose"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("attempt 0 rank 1: failing on purpose"), std::string::npos) << r.out;
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_NE(r.out.find("attempt 1 rank " + std::to_string(rank) + ": sum=3 expected=3 stale_key_seen=False"),
              std::string::npos)
        << r.out;
  }
}

TEST(Torch, RecordedTracebackAppearsInTheSummary) {
  if (!have_torch()) GTEST_SKIP() << "no PyTorch at " << CTRUN_TORCH_PYTHON;
  RunResult r =
      run_ctrun({"--nproc-per-node=2", workers_dir() + "/torch_record.py"}, torch_env(), std::chrono::seconds(120));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  auto root = r.err.find("Root Cause (first observed failure):");
  ASSERT_NE(root, std::string::npos) << r.err;
  std::string part = r.err.substr(root);
  EXPECT_NE(part.find("rank      : 1 (local_rank: 1)"), std::string::npos) << r.err;
  EXPECT_NE(part.find("/attempt_0/1/error.json"), std::string::npos) << r.err;
  EXPECT_NE(part.find("traceback : Traceback (most recent call last):"), std::string::npos) << r.err;
  EXPECT_NE(part.find("ValueError: boom from rank 1"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace ctrun::agent::test
