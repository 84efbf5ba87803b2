// The built-in health checks (agent/health/node_checks.hpp): each row of the table against temporary directories
// and a fake /proc root (no GPU on CI), then the built ctrun kept out of its round by one of them until the
// rendezvous' join_timeout (exit 4), and the same job running with --no-builtin-health-checks.
#include "agent/health/node_checks.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <set>
#include <string>

#include "agent/policy/agent_policy.hpp"
#include "tests/agent/run_ctrun.hpp"

namespace ctrun::agent {
namespace {

namespace fs = std::filesystem;
constexpr std::uint64_t kPetabyte = std::uint64_t{1} << 50;  // more than any file system here has free

std::string scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("ctrun-node-checks-" + std::to_string(::getpid())) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

std::optional<std::string> run_one(std::string_view name, const NodeCheckContext& c) {
  for (const auto& check : node_check_table()) {
    if (check.name == name) return check.run(c);
  }
  ADD_FAILURE() << "no check named " << name;
  return std::nullopt;
}

TEST(NodeChecks, TableRowsAreNamedOnceAndDocumented) {
  std::set<std::string_view> names;
  for (const auto& check : node_check_table()) {
    EXPECT_TRUE(names.insert(check.name).second) << check.name;
    EXPECT_FALSE(check.doc.empty()) << check.name;
  }
  EXPECT_EQ(names, (std::set<std::string_view>{"log_dir_space", "shm_space", "checkpoint_memory", "gpus_present"}));
}

TEST(NodeChecks, LogDirectoryWantsFreeSpaceAskedOfItsNearestExistingAncestor) {
  NodeCheckContext c;
  c.log_dir = scratch("logs") + "/not/made/yet";
  c.min_free_bytes = 1;
  EXPECT_EQ(run_one("log_dir_space", c), std::nullopt);
  c.min_free_bytes = kPetabyte;
  const auto problem = run_one("log_dir_space", c);
  ASSERT_TRUE(problem);
  EXPECT_NE(problem->find(scratch("logs")), std::string::npos) << *problem;
  EXPECT_NE(problem->find("--health-min-free"), std::string::npos) << *problem;
  c.min_free_bytes = 0;  // off
  EXPECT_EQ(run_one("log_dir_space", c), std::nullopt);
  c.min_free_bytes = kPetabyte;
  c.log_dir.clear();  // logs to the console only: nothing to check
  EXPECT_EQ(run_one("log_dir_space", c), std::nullopt);
}

TEST(NodeChecks, SharedMemoryWantsWhatCtrunPutsThereOnly) {
  NodeCheckContext c;
  c.shm_dir = scratch("shm");
  c.min_free_bytes = kPetabyte;  // the log directory's want: /dev/shm is asked for 1 MiB at most
  EXPECT_EQ(run_one("shm_space", c), std::nullopt);
  c.shm_dir = "/proc/self";  // a file system with nothing free
  const auto problem = run_one("shm_space", c);
  ASSERT_TRUE(problem);
  EXPECT_NE(problem->find("/proc/self has 0 B free"), std::string::npos) << *problem;
  EXPECT_NE(problem->find("1.0 MiB"), std::string::npos) << *problem;
}

TEST(NodeChecks, AnExplicitCheckpointMemoryMustFitWhatIsFreePlusWhatIsHeld) {
  NodeCheckContext c;
  c.shm_dir = scratch("shm");
  const std::uint64_t free = *free_bytes(c.shm_dir);
  c.checkpoint_limit = 0;  // none given: nothing promised
  EXPECT_EQ(run_one("checkpoint_memory", c), std::nullopt);
  c.checkpoint_limit = free / 2;
  EXPECT_EQ(run_one("checkpoint_memory", c), std::nullopt);
  c.checkpoint_limit = kPetabyte;
  const auto problem = run_one("checkpoint_memory", c);
  ASSERT_TRUE(problem);
  EXPECT_NE(problem->find("--checkpoint-memory"), std::string::npos) << *problem;
  c.checkpoint_held = kPetabyte;  // what the job holds already is room too
  EXPECT_EQ(run_one("checkpoint_memory", c), std::nullopt);
}

TEST(NodeChecks, TheGpusTheJobExpectsArePresentUnderAFakeProc) {
  NodeCheckContext c;
  c.proc_root = scratch("proc");
  c.gpus_expected = 0;  // a CPU job: nothing expected
  EXPECT_EQ(run_one("gpus_present", c), std::nullopt);
  c.gpus_expected = 2;
  auto problem = run_one("gpus_present", c);  // no driver at all
  ASSERT_TRUE(problem);
  EXPECT_NE(problem->find("expects 2 GPU(s)"), std::string::npos) << *problem;
  EXPECT_NE(problem->find("0 are present"), std::string::npos) << *problem;
  for (const char* bus : {"0000:01:00.0", "0000:02:00.0"}) fs::create_directories(c.proc_root + "/driver/nvidia/gpus/" + bus);
  EXPECT_EQ(run_one("gpus_present", c), std::nullopt);
  c.gpus_expected = 3;  // one fell off the bus
  EXPECT_TRUE(run_one("gpus_present", c));
  c.gpus_expected = 2;
  c.cuda_visible_devices = "1,2";  // device 2 does not exist: CUDA stops at it
  problem = run_one("gpus_present", c);
  ASSERT_TRUE(problem);
  EXPECT_NE(problem->find("CUDA_VISIBLE_DEVICES=1,2"), std::string::npos) << *problem;
  c.cuda_visible_devices = "1,0";
  EXPECT_EQ(run_one("gpus_present", c), std::nullopt);
}

TEST(NodeChecks, TheFirstFailingRowIsNamed) {
  NodeCheckContext c;
  c.log_dir = scratch("logs");
  c.shm_dir = scratch("shm");
  c.min_free_bytes = 1;
  EXPECT_EQ(run_node_checks(c), std::nullopt);
  c.min_free_bytes = kPetabyte;
  const auto failed = run_node_checks(c);
  ASSERT_TRUE(failed);
  EXPECT_EQ(failed->name, "log_dir_space");
}

// The built ctrun: a node the built-in checks keep out exits with kHealthCheckExitCode once join_timeout passed,
// naming the check; the same job runs with the checks turned off.
TEST(NodeChecks, CtrunStaysOutOfTheRoundThenExitsWithTheHealthCode) {
  const std::string logs = scratch("ctrun-logs");
  const std::vector<std::string> job = {"--standalone", "--nproc-per-node=1", "--log-dir", logs,
                                        "--rdzv-conf",  "join_timeout=2",     "--health-min-free", "1000T"};
  std::vector<std::string> kept = job;
  kept.insert(kept.end(), {"--no-python", "true"});
  const test::RunResult out = test::run_ctrun(kept, {}, std::chrono::seconds(60));
  EXPECT_EQ(out.exit_code, kHealthCheckExitCode) << out.err;
  EXPECT_NE(out.err.find("built-in check log_dir_space"), std::string::npos) << out.err;
  EXPECT_NE(out.err.find("stays out of the round"), std::string::npos) << out.err;
  std::vector<std::string> off = job;
  off.insert(off.end(), {"--no-builtin-health-checks", "--no-python", "true"});
  const test::RunResult ran = test::run_ctrun(off, {}, std::chrono::seconds(60));
  EXPECT_EQ(ran.exit_code, 0) << ran.err;
  fs::remove_all(fs::temp_directory_path() / ("ctrun-node-checks-" + std::to_string(::getpid())));
}

}  // namespace
}  // namespace ctrun::agent
