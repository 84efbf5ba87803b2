// The job's view (agent/status/job_view.hpp): the attempts' timeline and this node's workers from the agent's events
// (a fake clock), the ranks' states merged from the records and the events, the progress history and its cap, the
// text rendering of the model, and log tails.
#include "agent/status/job_view.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "agent/hang/table.hpp"
#include "agent/status/log_tail.hpp"
#include "agent/status/page.hpp"
#include "agent/status/progress_history.hpp"
#include "agent/status/view_text.hpp"
#include "tests/agent/hang/records_fixture.hpp"

namespace ctrun::agent::status {
namespace {

using json = nlohmann::json;

void start(JobView& v, int nproc, int restart, double t, std::uint64_t round = 1) {
  v.observe(Event::kRendezvous, {{"round", round}, {"group_rank", 0}, {"group_world_size", 1}, {"world_size", nproc}},
            t);
  for (int r = 0; r < nproc; ++r)
    v.observe(Event::kWorkerStart, {{"local_rank", r}, {"rank", r}, {"pid", 100 + r}, {"restart_count", restart}}, t);
}

void exit_worker(JobView& v, int rank, int code, double t, int restart = 0) {
  json f = {{"local_rank", rank}, {"rank", rank}, {"pid", 100 + rank}, {"exitcode", code}, {"restart_count", restart}};
  if (code == -9) f["signal"] = "SIGKILL";
  if (code == -15) f["signal"] = "SIGTERM";
  v.observe(Event::kWorkerExit, f, t);
}

TEST(JobView, AttemptsHaveTheirCauseAndTheStepEachResumedFrom) {
  JobView v("vm");
  v.observe(Event::kAgentStart, {{"run_id", "job1"}, {"nproc_per_node", 4}, {"max_restarts", 3}}, 100);
  start(v, 4, 0, 101);
  exit_worker(v, 2, -9, 110);  // the cause
  for (int r : {0, 1, 3}) exit_worker(v, r, -15, 111);  // collateral of the stop
  v.observe(Event::kRestart, {{"restart_count", 1}, {"remaining_restarts", 2}}, 112);
  v.observe(Event::kRendezvous, {{"round", 2}, {"group_rank", 0}, {"group_world_size", 1}, {"world_size", 4}}, 113);
  v.observe(Event::kCheckpointHeld, {{"resume_step", 3}}, 113.5);
  for (int r = 0; r < 4; ++r)
    v.observe(Event::kWorkerStart, {{"local_rank", r}, {"rank", r}, {"pid", 200 + r}, {"restart_count", 1}}, 114);
  const json m = v.model(json::object(), 120);
  ASSERT_EQ(m["attempts"].size(), 2u) << m.dump(2);
  const json& first = m["attempts"][0];
  EXPECT_EQ(first["outcome"], "restarted");
  EXPECT_EQ(first["cause"]["kind"], "exit");
  EXPECT_EQ(first["cause"]["rank"], 2);
  EXPECT_EQ(first["cause"]["text"], "rank 2 (local rank 2 on vm) was killed by SIGKILL");
  EXPECT_EQ(first["duration_s"], 10.0);  // from the first worker's start to the last exit
  EXPECT_FALSE(first["checkpoints"].get<bool>());
  const json& second = m["attempts"][1];
  EXPECT_EQ(second["outcome"], "running");
  EXPECT_EQ(second["restart_count"], 1);
  EXPECT_EQ(second["resume_step"], 3);
  EXPECT_EQ(second["round"], 2);
  EXPECT_EQ(m["job"]["restarts"], 1);
  EXPECT_EQ(m["job"]["attempts"], 2);
  EXPECT_EQ(m["job"]["state"], "running");
  // This node's workers are rows even before they have progress records: "starting" first, "running" later.
  ASSERT_EQ(m["ranks"].size(), 4u);
  EXPECT_EQ(m["ranks"][1]["state"], "starting");
  EXPECT_EQ(m["ranks"][1]["pid"], 201);
  EXPECT_TRUE(m["ranks"][1]["local"].get<bool>());
  EXPECT_EQ(v.model(json::object(), 130)["ranks"][1]["state"], "running");
  // The text rendering names the cause and the resume step.
  const std::string text = view_text(m, "");
  EXPECT_NE(text.find("restarted: rank 2 (local rank 2 on vm) was killed by SIGKILL"), std::string::npos) << text;
  EXPECT_NE(text.find("resumed from step 3"), std::string::npos) << text;
  EXPECT_NE(text.find("job job1: running, attempt 2 (1 of 3 restarts used)"), std::string::npos) << text;
}

TEST(JobView, AHangVerdictIsTheCauseNotTheKillThatFollows) {
  JobView v("vm");
  start(v, 2, 0, 0);
  v.observe(Event::kHangTimeout,
            {{"group", 0}, {"op", "all_reduce"}, {"seq", 3}, {"not_entered", {{{"rank", 1}}}}, {"waited_s", 4.2}}, 5);
  v.observe(Event::kHangFailed, {{"rank", 1}, {"local_rank", 1}, {"pid", 101}}, 5);
  exit_worker(v, 1, -9, 5.1);
  exit_worker(v, 0, -15, 5.2);
  const json a = v.model(json::object(), 6)["attempts"][0];
  EXPECT_EQ(a["cause"]["kind"], "hang");
  EXPECT_EQ(a["cause"]["rank"], 1);
  ASSERT_EQ(a["notes"].size(), 1u);
  EXPECT_EQ(a["notes"][0], "hang verdict: rank 1 not entered all_reduce #3 of group 0 (4.2 s)");
}

TEST(JobView, NodesStepOutsHealthChecksAndRoundsEndedByOthers) {
  JobView v("vm");
  v.observe(Event::kHealthCheckFailed,
            {{"command", "nvidia-smi"}, {"result", "exit 1"}, {"failures", 1}, {"retry_in_s", 30}}, 1);
  start(v, 2, 0, 40);
  v.observe(Event::kMembershipChange, {{"nodes_waiting", 1}, {"reason", "dead: node 10.0.0.2 stopped its heartbeats"}},
            50);
  exit_worker(v, 0, -15, 51);
  exit_worker(v, 1, -15, 51);
  const json m = v.model(json::object(), 52);
  EXPECT_EQ(m["attempts"][0]["cause"]["kind"], "node_lost");
  EXPECT_EQ(m["nodes"]["self"]["health_check_failures"], 1);
  EXPECT_EQ(m["nodes"]["spares_waiting"], 1);
  ASSERT_EQ(m["nodes"]["events"].size(), 2u);
  EXPECT_EQ(m["nodes"]["events"][0]["text"], "nvidia-smi: exit 1 (1 in a row); retry in 30 s");
  v.observe(Event::kNodeSteppedOut, {{"failures", 3}, {"window_s", 600}, {"cooldown_s", 60}, {"step_outs", 1}}, 60);
  const json later = v.model(json::object(), 70);
  EXPECT_EQ(later["nodes"]["self"]["step_outs"], 1);
  EXPECT_EQ(later["nodes"]["self"]["cooldown_left_s"], 50.0);
  EXPECT_EQ(later["job"]["state"], "stepped out");
}

TEST(JobView, TheFailureSummaryAndTheEnd) {
  JobView v("vm");
  start(v, 1, 0, 0);
  exit_worker(v, 0, 1, 3);
  v.observe(Event::kFailed, {{"rank", 0}, {"exitcode", 1}, {"summary", "train.py FAILED\nRoot Cause ..."}}, 3.1);
  EXPECT_TRUE(v.over());
  v.observe(Event::kShutdown, {{"exit_code", 1}}, 3.2);
  const json m = v.model(json::object(), 4);
  EXPECT_EQ(m["failure"]["summary"], "train.py FAILED\nRoot Cause ...");
  EXPECT_EQ(m["job"]["state"], "failed");
  EXPECT_EQ(m["job"]["exit_code"], 1);
  EXPECT_EQ(m["attempts"][0]["outcome"], "failed");
  EXPECT_EQ(m["ranks"][0]["state"], "exited");
  EXPECT_EQ(m["ranks"][0]["exitcode"], 1);
  EXPECT_NE(view_text(m, "").find("failure: train.py FAILED"), std::string::npos);
}

// A job that restarts past the cap keeps its first attempt and the newest ones, and says how many it left out.
TEST(JobView, AttemptsAreCapped) {
  ViewLimits limits;
  limits.attempts = 5;
  JobView v("vm", limits);
  for (int i = 0; i < 12; ++i) {
    start(v, 1, i, i * 10.0, static_cast<std::uint64_t>(i + 1));
    exit_worker(v, 0, 1, i * 10.0 + 1, i);
    v.observe(Event::kRestart, {{"restart_count", i + 1}, {"remaining_restarts", 100}}, i * 10.0 + 2);
  }
  const json m = v.model(json::object(), 200);
  ASSERT_EQ(m["attempts"].size(), 5u);
  EXPECT_EQ(m["attempts"][0]["attempt"], 0);
  EXPECT_EQ(m["attempts"][1]["attempt"], 8);
  EXPECT_EQ(m["attempts"][4]["attempt"], 11);
  EXPECT_EQ(m["job"]["attempts"], 12);
  EXPECT_EQ(m["job"]["attempts_left_out"], 7);
}

// The ranks' records: a hang's culprit stands out as "hung", every row has its rate, and remote ranks keep the node
// their summary came from.
TEST(JobView, RanksFromRecordsAreMergedWithThisNodesWorkers) {
  using namespace hang::test;  // NOLINT: the fixture's records
  hang::Detector d({.report_after_s = 10});
  auto ranks = rank2_missing(12);
  ranks[3].node = "1";
  d.observe(0, ranks);
  JobView v("vm");
  start(v, 3, 0, 0);
  v.sample(ranks, 100);
  for (auto& r : ranks)
    for (auto& g : r.groups) g.done += 5;
  v.sample(ranks, 101);
  const json m = v.model(hang::table_json(ranks, d), 101);
  ASSERT_EQ(m["ranks"].size(), 4u) << m.dump(2);
  EXPECT_EQ(m["ranks"][2]["state"], "hung");
  EXPECT_EQ(m["ranks"][0]["state"], "in_op");
  EXPECT_EQ(m["ranks"][0]["rate"], 5.0);
  EXPECT_EQ(m["ranks"][3]["node"], "1");
  EXPECT_EQ(m["ranks"][0]["node"], "0");
  EXPECT_EQ(m["nodes"]["nodes"].size(), 2u);
  EXPECT_EQ(m["job"]["job_rate"], 5.0);
  EXPECT_NE(hang::table_text(m).find("hung"), std::string::npos);
  // The page renders the same rows on the server: a row per rank with its state, the hung one marked.
  const std::string html = page_html(m, view_text(m, ""));
  EXPECT_NE(html.find("<tr class=\"rank st-hung\" data-rank=\"2\">"), std::string::npos);
  EXPECT_NE(html.find("hang: rank 2"), std::string::npos);
  std::size_t scripts = 0;
  for (std::size_t at = 0; (at = html.find("</script>", at)) != std::string::npos; ++at) ++scripts;
  EXPECT_EQ(scripts, 2u) << "the model's JSON cannot end its script element";
}

TEST(ProgressHistory, RatesPerRankAndTheJobsMedian) {
  ProgressHistory h;
  h.sample({{0, 0}, {1, 0}, {2, 0}}, 0);
  h.sample({{0, 10}, {1, 20}, {2, 2}}, 0.5);  // too soon: one sample a second
  EXPECT_EQ(h.samples(), 1u);
  h.sample({{0, 10}, {1, 20}, {2, 2}}, 1);
  EXPECT_EQ(h.rate_of(0), 10.0);
  EXPECT_EQ(h.rate_of(2), 2.0);
  EXPECT_EQ(h.job_rate(), 10.0);
  h.sample({{0, 5}, {1, 40}, {2, 4}}, 2);  // rank 0 restarted: no rate for it in this sample
  EXPECT_EQ(h.rate_of(0), std::nullopt);
  EXPECT_EQ(h.rate_of(1), 20.0);
  const json j = h.to_json(2);
  EXPECT_EQ(j["t"].size(), 3u);
  EXPECT_EQ(j["ranks"]["1"].size(), 3u);
  EXPECT_TRUE(j["ranks"]["0"][2].is_null());
  EXPECT_EQ(j["t"][2], 0.0);
}

// The history's memory is capped: past the bytes a job's ranks take, fewer samples are kept.
TEST(ProgressHistory, MemoryIsCapped) {
  ProgressHistory five_minutes;
  std::vector<std::pair<int, std::uint64_t>> ranks;
  for (int r = 0; r < 4096; ++r) ranks.emplace_back(r, 0);
  for (int s = 0; s < 400; ++s) {
    for (auto& [rank, count] : ranks) count += 3;
    five_minutes.sample(ranks, s);
  }
  EXPECT_LE(five_minutes.memory_bytes(), five_minutes.limits().max_bytes);
  EXPECT_EQ(five_minutes.samples(), (2u << 20) / (4096 * sizeof(float)));  // 128 samples at 4,096 ranks
  ProgressHistory small;
  for (int s = 0; s < 400; ++s) small.sample({{0, static_cast<std::uint64_t>(s)}}, s);
  EXPECT_EQ(small.samples(), 300u) << "five minutes at one a second";
}

TEST(LogTail, TheLastWholeLinesWithinTheBound) {
  const auto path = std::filesystem::temp_directory_path() / ("ctrun_log_tail_" + std::to_string(::getpid()));
  {
    std::ofstream out(path);
    for (int i = 0; i < 1000; ++i) out << "line " << i << "\n";
    out << "partial";
  }
  EXPECT_EQ(file_tail(path, 1 << 20, 3), "line 998\nline 999\npartial");
  const std::string bounded = file_tail(path, 40, 100);
  EXPECT_EQ(bounded.substr(0, 5), "line ") << "a line cut by the bound is left out: " << bounded;
  EXPECT_LE(bounded.size(), 40u);
  EXPECT_EQ(file_tail(path.string() + ".missing", 100, 3), "");
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace ctrun::agent::status
