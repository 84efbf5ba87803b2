// Hangs and stragglers under the real ctrun (issue 22): torch 1.13 workers on backend "ctrun", four ranks on one
// node, the agent's HangWatch wired in (agent/agent.cpp).
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "../run_ctrun.hpp"
#include "common/http/client.hpp"
#include "tests/support/torch.hpp"

namespace ctrun::agent::test {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using ctrun::test::eventually;
using ctrun::test::torch_unavailable_reason;

// Real torch and the ctrun_torch module built beside ctrun: without either these tests skip, never fail.
bool torch_ready() {
  if (!torch_unavailable_reason().empty()) return false;
  std::error_code ec;
  for (auto it = fs::directory_iterator(CTRUN_TORCH_MODULE_DIR, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    if (it->path().filename().string().starts_with("ctrun_torch")) return true;
  }
  return false;
}

std::string worker() { return std::string(HANG_WORKERS_DIR) + "/hang_worker.py"; }

std::vector<nlohmann::json> events_named(const std::string& path, const std::string& name) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.value("event", "") == name) out.push_back(j);
  }
  return out;
}

std::vector<std::string> args(const std::string& dir, std::vector<std::string> extra) {
  std::vector<std::string> a = {"--standalone", "--nproc-per-node",   "4", "--log-dir", dir + "/logs",
                                "--event-log",  dir + "/events.jsonl"};
  a.insert(a.end(), extra.begin(), extra.end());
  a.push_back(worker());
  return a;
}

const std::map<std::string, std::string> kEnv = {{"PYTHON_EXEC", CTRUN_TORCH_PYTHON}};

// Cold workers and workers forked from a --preload warm process (whose sitecustomize sets up the stack dumps
// again in each forked worker) alike.
class CtrunHangNamed : public ::testing::TestWithParam<bool> {};

TEST_P(CtrunHangNamed, ARankSleepingBeforeACollectiveIsNamedWithItsStackAndFailed) {
  if (!torch_ready()) GTEST_SKIP() << "needs torch 1.13 and ctrun_torch";
  const bool preload = GetParam();
  const std::string dir = fresh_dir(preload ? "ctrun_hang_named_preload" : "ctrun_hang_named");
  auto env = kEnv;
  env["HANG_RANK"] = "2";
  std::vector<std::string> extra{"--hang-timeout", "4", "--hang-report-after", "2"};
  if (preload) extra.insert(extra.end(), {"--preload", "torch"});
  RunResult r = run_ctrun(args(dir, extra), env, std::chrono::seconds(90));
  if (preload) {
    EXPECT_EQ(r.err.find("starting a worker cold"), std::string::npos) << r.err;
  }
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("has not entered all_reduce #3 of group 0; ranks 0,1,3 have waited"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("rank 2 (host "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("hang_worker.py\", line 32 in <module>"), std::string::npos) << "the culprit's stack\n" << r.err;
  EXPECT_NE(r.err.find("traceback : hang: rank 2"), std::string::npos) << "the summary names the hang\n" << r.err;
  auto verdicts = events_named(dir + "/events.jsonl", "hang_timeout");
  ASSERT_EQ(verdicts.size(), 1u);
  EXPECT_LT(verdicts[0]["waited_s"].get<double>(), 4 + 5) << "named within hang-timeout + 5 s";
  EXPECT_EQ(verdicts[0]["not_entered"][0]["rank"], 2);
}

INSTANTIATE_TEST_SUITE_P(ColdAndPreloaded, CtrunHangNamed, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Preloaded" : "Cold"; });

TEST(CtrunHang, WithARestartLeftAttemptOneCompletes) {
  if (!torch_ready()) GTEST_SKIP() << "needs torch 1.13 and ctrun_torch";
  const std::string dir = fresh_dir("ctrun_hang_restart");
  auto env = kEnv;
  env["HANG_RANK"] = "2";
  env["HANG_ATTEMPT"] = "0";
  RunResult r = run_ctrun(args(dir, {"--hang-timeout", "3", "--hang-report-after", "2", "--max-restarts", "1"}), env,
                          std::chrono::seconds(120));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(events_named(dir + "/events.jsonl", "hang_failed").size(), 1u) << r.err;
  EXPECT_EQ(events_named(dir + "/events.jsonl", "restart").size(), 1u) << r.err;
}

TEST(CtrunHang, ASlowButProgressingRankIsNeverHungAndIsTheStraggler) {
  if (!torch_ready()) GTEST_SKIP() << "needs torch 1.13 and ctrun_torch";
  const std::string dir = fresh_dir("ctrun_hang_slow");
  auto env = kEnv;
  env["SLOW_RANK"] = "1";
  env["SLOW_S"] = "0.5";
  env["STEPS"] = "14";
  env["CTRUN_STRAGGLER_INTERVAL"] = "2";
  RunResult r =
      run_ctrun(args(dir, {"--hang-timeout", "2", "--hang-report-after", "1.5"}), env, std::chrono::seconds(120));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(events_named(dir + "/events.jsonl", "hang_suspected").empty()) << r.err;
  auto stragglers = events_named(dir + "/events.jsonl", "straggler");
  ASSERT_FALSE(stragglers.empty()) << r.err;
  for (const auto& s : stragglers) EXPECT_EQ(s["rank"], 1) << s.dump();
}

// --hang-timeout auto: learned from the job's own rhythm (agent/hang/auto_timeout.hpp). A real hang after the
// warm-up fails the job within the learned timeout; a job whose every step is slow (ranks 1-3 wait 1 s inside
// each all_reduce for rank 0) runs to its end, since the timeout learned is a multiple of its gaps.
TEST(CtrunHangAuto, ARealHangPastTheWarmUpFailsTheJob) {
  if (!torch_ready()) GTEST_SKIP() << "needs torch 1.13 and ctrun_torch";
  const std::string dir = fresh_dir("ctrun_hang_auto");
  auto env = kEnv;
  env["HANG_RANK"] = "2";
  env["SLOW_RANK"] = "0";
  env["SLOW_S"] = "0.2";
  env["STEPS"] = "14";
  env["LOGLEVEL"] = "INFO";  // the learned value is said at info
  RunResult r = run_ctrun(args(dir, {"--hang-timeout", "auto:2"}), env, std::chrono::seconds(120));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  auto learned = events_named(dir + "/events.jsonl", "hang_timeout_learned");
  ASSERT_FALSE(learned.empty()) << r.err;
  const double timeout = learned.back()["timeout_s"].get<double>();
  EXPECT_GE(timeout, 2) << "the floor";
  EXPECT_LT(timeout, 20) << learned.back().dump();
  EXPECT_GE(learned.front()["completed"].get<int>(), 10) << "after the warm-up";
  EXPECT_NE(r.err.find("hang timeout (auto): "), std::string::npos) << r.err;
  auto verdicts = events_named(dir + "/events.jsonl", "hang_timeout");
  ASSERT_EQ(verdicts.size(), 1u) << r.err;
  EXPECT_EQ(verdicts[0]["not_entered"][0]["rank"], 2);
  EXPECT_LT(verdicts[0]["waited_s"].get<double>(), timeout + 5);
  EXPECT_EQ(events_named(dir + "/events.jsonl", "hang_failed").size(), 1u) << r.err;
}

TEST(CtrunHangAuto, ASlowButRegularStepIsNeverFailed) {
  if (!torch_ready()) GTEST_SKIP() << "needs torch 1.13 and ctrun_torch";
  const std::string dir = fresh_dir("ctrun_hang_auto_slow");
  auto env = kEnv;
  env["SLOW_RANK"] = "0";
  env["SLOW_S"] = "1";
  env["STEPS"] = "14";
  // A floor below the step: only what is learned keeps the 1 s waits from being verdicts.
  RunResult r = run_ctrun(args(dir, {"--hang-timeout", "auto:0.5"}), env, std::chrono::seconds(120));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(events_named(dir + "/events.jsonl", "hang_timeout").empty()) << r.err;
  auto learned = events_named(dir + "/events.jsonl", "hang_timeout_learned");
  ASSERT_FALSE(learned.empty()) << r.err;
  EXPECT_GE(learned.front()["longest_gap_s"].get<double>(), 0.9) << learned.front().dump();
  EXPECT_GE(learned.front()["timeout_s"].get<double>(), 3.6) << learned.front().dump();
}

// Point-to-point: rank 1 waits in a recv while rank 0 sleeps before sending. Reported naming both (with a hang
// timeout set: never failed for it), resolved once the send comes, and the job ends well.
TEST(CtrunHang, ALongRecvIsReportedNeverFailedAndResolved) {
  if (!torch_ready()) GTEST_SKIP() << "needs torch 1.13 and ctrun_torch";
  const std::string dir = fresh_dir("ctrun_hang_p2p");
  auto env = kEnv;
  env.emplace("P2P_WAIT", "6");
  const std::vector<std::string> a = {
      "--standalone",        "--nproc-per-node", "2", "--log-dir",           dir + "/logs", "--event-log",
      dir + "/events.jsonl", "--hang-timeout",   "3", "--hang-report-after", "2",           worker()};
  RunResult r = run_ctrun(a, env, std::chrono::seconds(90));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  auto waits = events_named(dir + "/events.jsonl", "p2p_wait");
  ASSERT_EQ(waits.size(), 1u) << r.err;
  EXPECT_EQ(waits[0]["rank"], 1);
  EXPECT_EQ(waits[0]["op"], "recv");
  EXPECT_EQ(waits[0]["peer"], 0);
  EXPECT_EQ(events_named(dir + "/events.jsonl", "p2p_wait_resolved").size(), 1u) << r.err;
  EXPECT_TRUE(events_named(dir + "/events.jsonl", "hang_failed").empty()) << r.err;
  EXPECT_NE(r.err.find("in recv from rank 0 of group 0 (16 bytes); rank 0: between ops for"), std::string::npos)
      << r.err;
}

// A job that dies after a straggler was seen: the failure summary is followed by that straggler.
TEST(CtrunHang, AFailedJobsSummaryNamesTheStraggler) {
  if (!torch_ready()) GTEST_SKIP() << "needs torch 1.13 and ctrun_torch";
  const std::string dir = fresh_dir("ctrun_hang_slow_fail");
  auto env = kEnv;
  env["SLOW_RANK"] = "1";
  env["SLOW_S"] = "0.5";
  env["STEPS"] = "14";
  env["FAIL_AT_END"] = "3";
  env["CTRUN_STRAGGLER_INTERVAL"] = "2";
  RunResult r = run_ctrun(args(dir, {"--hang-report-after", "1.5"}), env, std::chrono::seconds(120));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  const auto summary = r.err.find("Root Cause (first observed failure):");
  ASSERT_NE(summary, std::string::npos) << r.err;
  EXPECT_NE(r.err.find("straggler (last report): rank 1 is last into the collectives of group 0", summary),
            std::string::npos)
      << r.err;
}

// Report only (no --hang-timeout): the job goes on; the live view lists every rank; Ctrl-C ends it all quickly.
TEST(CtrunHang, ReportedNotKilledLiveViewAndCtrlC) {
  if (!torch_ready()) GTEST_SKIP() << "needs torch 1.13 and ctrun_torch";
  const std::string dir = fresh_dir("ctrun_hang_report");
  auto env = kEnv;
  env.emplace("HANG_RANK", "2");  // (not operator[]=: GCC 12 warns falsely of -Wrestrict once this test inlines it)
  CtrunProcess p(args(dir, {"--hang-report-after", "2"}), env);
  ASSERT_TRUE(eventually([&] { return !events_named(dir + "/events.jsonl", "hang_suspected").empty(); },
                         std::chrono::seconds(60), std::chrono::milliseconds(100)));
  std::this_thread::sleep_for(std::chrono::seconds(2));
  EXPECT_TRUE(events_named(dir + "/events.jsonl", "hang_failed").empty()) << "reported, never acted on";
  // The live view: the port is in the run directory.
  std::string port_file;
  for (const auto& e : fs::recursive_directory_iterator(dir + "/logs")) {
    if (e.path().filename() == "status_port") port_file = e.path().string();
  }
  ASSERT_FALSE(port_file.empty());
  const int port = std::stoi(read_file(port_file));
  auto table = nlohmann::json::parse(http::get("127.0.0.1", port, "/status.json"));
  ASSERT_EQ(table["ranks"].size(), 4u) << table.dump();
  EXPECT_EQ(table["ranks"][2]["groups"][0]["state"], "between_ops") << table.dump();
  EXPECT_EQ(table["hangs"].size(), 1u) << table.dump();
  EXPECT_NE(http::get("127.0.0.1", port, "/").find("hang: rank 2"), std::string::npos);
  // `ctrun --status` finds the job from its log dir (and from HOST:PORT), as text and as JSON.
  RunResult text = run_ctrun({"--status", dir + "/logs"}, {}, std::chrono::seconds(30));
  EXPECT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("hang: rank 2"), std::string::npos) << text.out;
  RunResult as_json =
      run_ctrun({"--status", "--json", "127.0.0.1:" + std::to_string(port)}, {}, std::chrono::seconds(30));
  EXPECT_EQ(as_json.exit_code, 0) << as_json.err;
  EXPECT_EQ(nlohmann::json::parse(as_json.out, nullptr, false).value("ranks", nlohmann::json::array()).size(), 4u)
      << as_json.out;
  // `ctrun --status --stacks`: every rank's Python stack now; rank 2 sleeps on line 32 of the worker.
  RunResult stacks = run_ctrun({"--status", "--stacks", dir + "/logs"}, {}, std::chrono::seconds(30));
  EXPECT_EQ(stacks.exit_code, 0) << stacks.err;
  for (int rank = 0; rank < 4; ++rank)
    EXPECT_NE(stacks.out.find("stack of rank " + std::to_string(rank) + " "), std::string::npos) << stacks.out;
  EXPECT_NE(stacks.out.find("hang_worker.py\", line 32 in <module>"), std::string::npos) << stacks.out;
  const auto sent = Clock::now();
  ::kill(p.pid(), SIGINT);
  RunResult r = p.wait(std::chrono::seconds(60));
  const double took = std::chrono::duration<double>(Clock::now() - sent).count();
  EXPECT_NE(r.exit_code, 0);
  // What this guards against is a wait for the shutdown timeout (30 s: ranks blocked in the collective ignoring
  // SIGINT, then SIGKILL). On a quiet machine it takes 0.4-0.6 s (docs/hang.md); under load, the ranks' own
  // Python exits take seconds (3.3 s at load average 25), so the bound is well below 30 s, not a speed target.
  EXPECT_LT(took, 15.0) << "Ctrl-C during a detected hang ends everything (" << took << " s)\n" << r.err;
  std::printf("Ctrl-C to exit: %.2f s\n", took);
  // The ended job's port file is gone: `ctrun --status` says that no job answered (exit 1), naming where it looked.
  EXPECT_FALSE(fs::exists(port_file)) << port_file;
  RunResult after = run_ctrun({"--status=" + dir + "/logs"}, {}, std::chrono::seconds(30));
  EXPECT_EQ(after.exit_code, 1) << after.out;
  EXPECT_NE(after.err.find("no running job answered under " + dir + "/logs"), std::string::npos) << after.err;
}

}  // namespace
}  // namespace ctrun::agent::test

namespace ctrun::agent::test {
namespace {

// Two agents (c10d, two "nodes" of two ranks each on this host): the rank that hangs is on group rank 1's node;
// the agent of group rank 0 names it from the summaries, and only its own agent fails it (the verdict comes
// through the round's store).
TEST(CtrunHang, TwoAgentsNameAHangOnTheOtherNode) {
  if (!torch_ready()) GTEST_SKIP() << "needs torch 1.13 and ctrun_torch";
  const std::string dir = fresh_dir("ctrun_hang_two_nodes");
  auto node = [&](const std::string& endpoint, const std::string& tag) {
    return std::vector<std::string>{"--nnodes=2",
                                    "--nproc-per-node=2",
                                    "--rdzv-backend=c10d",
                                    "--rdzv-endpoint=" + endpoint,
                                    "--rdzv-id=hang2",
                                    "--local-addr=127.0.0.1",
                                    "--log-dir=" + dir + "/logs_" + tag,
                                    "--event-log=" + dir + "/" + tag + ".jsonl",
                                    "--hang-timeout=8",
                                    "--hang-report-after=3",
                                    worker()};
  };
  auto env = kEnv;
  env["HANG_GROUP_RANK"] = "1";
  CtrunProcess a(node("127.0.0.1:0", "a"), env);
  const std::string endpoint = served_rdzv_store(dir + "/a.jsonl", std::chrono::seconds(20));
  ASSERT_FALSE(endpoint.empty());
  CtrunProcess b(node(endpoint, "b"), env);
  RunResult ra = a.wait(std::chrono::seconds(120));
  RunResult rb = b.wait(std::chrono::seconds(30));
  // Which agent is group rank 0 is decided by the rendezvous: find it in the event logs.
  auto group_rank_of = [&](const std::string& tag) {
    auto r = events_named(dir + "/" + tag + ".jsonl", "rendezvous");
    return r.empty() ? -1 : r[0]["group_rank"].get<int>();
  };
  const bool a_first = group_rank_of("a") == 0;
  const RunResult& aggregator = a_first ? ra : rb;
  const RunResult& culprits_node = a_first ? rb : ra;
  const std::string culprit_events = dir + (a_first ? "/b.jsonl" : "/a.jsonl");
  const std::string aggregator_events = dir + (a_first ? "/a.jsonl" : "/b.jsonl");
  EXPECT_NE(aggregator.err.find("has not entered all_reduce #3 of group 0"), std::string::npos)
      << "group rank 0's agent names the hang on the other node\n"
      << aggregator.err;
  EXPECT_FALSE(events_named(aggregator_events, "hang_suspected").empty());
  EXPECT_TRUE(events_named(aggregator_events, "hang_failed").empty()) << "only the culprit's own agent acts";
  EXPECT_EQ(events_named(culprit_events, "hang_failed").size(), 1u) << culprits_node.err;
  EXPECT_NE(culprits_node.exit_code, 0);
}

}  // namespace
}  // namespace ctrun::agent::test
