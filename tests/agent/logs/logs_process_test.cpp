// Logs through real processes: torchrun's file layout per attempt, tee prefixes, redirect maps,
// --local-ranks-filter, whole lines under concurrent output of 8 ranks, error files and the event log.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include <nlohmann/json.hpp>

#include "tests/agent/run_ctrun.hpp"

namespace ctrun::agent::test {
namespace {

// The one <run_id>_<random> folder ctrun made under log_dir.
std::string run_dir(const std::string& log_dir, const std::string& run_id) {
  for (const auto& e : std::filesystem::directory_iterator(log_dir)) {
    if (e.path().filename().string().rfind(run_id + "_", 0) == 0) return e.path().string();
  }
  return "";
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

TEST(Logs, LayoutPerAttemptAndRedirects) {
  std::string dir = fresh_dir("logs_layout");
  RunResult r = run_ctrun({"--nproc-per-node=2", "--rdzv-id", "job7", "--max-restarts", "1", "--log-dir", dir, "-r",
                           "3", "--no-python", worker_script("restart_once.sh")},
                          {}, std::chrono::seconds(30));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string run = run_dir(dir, "job7");
  ASSERT_FALSE(run.empty());
  for (int attempt : {0, 1}) {
    for (int rank : {0, 1}) {
      std::string base = run + "/attempt_" + std::to_string(attempt) + "/" + std::to_string(rank);
      EXPECT_TRUE(std::filesystem::exists(base + "/stdout.log")) << base;
      EXPECT_TRUE(std::filesystem::exists(base + "/stderr.log")) << base;
      EXPECT_EQ(read_file(base + "/stdout.log"),
                "attempt " + std::to_string(attempt) + " rank " + std::to_string(rank) + "\n");
    }
  }
  EXPECT_EQ(r.out.find("attempt"), std::string::npos) << "redirected output reached the console: " << r.out;
}

TEST(Logs, RedirectMap) {
  std::string dir = fresh_dir("logs_map");
  RunResult r = run_ctrun({"--nproc-per-node=2", "--rdzv-id", "m", "--log-dir", dir, "--redirects", "0:1,1:2",
                           "--no-python", worker_script("chatter.sh")},
                          {{"LINES", "3"}}, std::chrono::seconds(30));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string run = run_dir(dir, "m");
  EXPECT_NE(read_file(run + "/attempt_0/0/stdout.log").find("rank 0 line 3"), std::string::npos);
  EXPECT_EQ(read_file(run + "/attempt_0/0/stderr.log"), "");  // rank 0's stderr went to the console
  EXPECT_EQ(read_file(run + "/attempt_0/1/stderr.log"), "err from 1\n");
  EXPECT_NE(r.err.find("err from 0"), std::string::npos);
  EXPECT_NE(r.out.find("rank 1 line 3"), std::string::npos);
  EXPECT_EQ(r.out.find("rank 0 line"), std::string::npos);
}

TEST(Logs, TeePrefixesAndLocalRanksFilter) {
  std::string dir = fresh_dir("logs_tee");
  RunResult r = run_ctrun({"--nproc-per-node=3", "--rdzv-id", "t", "--role", "trainer", "--log-dir", dir, "--tee", "3",
                           "--local-ranks-filter", "0,2", "--no-python", worker_script("chatter.sh")},
                          {{"LINES", "2"}}, std::chrono::seconds(30));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("[trainer0]:rank 0 line 1 aaaa"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[trainer2]:rank 2 line 2 aaaa"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("[trainer1]"), std::string::npos) << "rank 1 is filtered out: " << r.out;
  EXPECT_NE(r.err.find("[trainer2]:err from 2"), std::string::npos) << r.err;
  // Files hold every rank, unprefixed.
  std::string run = run_dir(dir, "t");
  EXPECT_NE(read_file(run + "/attempt_0/1/stdout.log").find("rank 1 line 2"), std::string::npos);
  EXPECT_EQ(read_file(run + "/attempt_0/1/stdout.log").find("[trainer"), std::string::npos);
}

TEST(Logs, PrefixTemplate) {
  RunResult r = run_ctrun(
      {"--nproc-per-node=2", "--tee", "1", "--log-dir", "/dev/null", "--no-python", worker_script("chatter.sh")},
      {{"LINES", "1"}, {"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "<${role_name}|${rank}> "}}, std::chrono::seconds(30));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("<default|1> rank 1 line 1"), std::string::npos) << r.out;
}

// torchrun's newest flag (after 2.6): --log-line-prefix-template, which wins over the variable.
TEST(Logs, PrefixTemplateFlagWinsOverTheVariable) {
  RunResult r = run_ctrun({"--nproc-per-node=2", "--tee", "1", "--log-line-prefix-template",
                           "{${hostname}:${local_rank}} ", "--no-python", worker_script("chatter.sh")},
                          {{"LINES", "1"}, {"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", "<${role_name}|${rank}> "}},
                          std::chrono::seconds(30));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find(":1} rank 1 line 1"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("<default|"), std::string::npos) << r.out;
  RunResult underscore = run_ctrun({"--nproc_per_node=1", "--tee=1", "--log_line_prefix_template=[x${rank}] ",
                                    "--no-python", worker_script("chatter.sh")},
                                   {{"LINES", "1"}}, std::chrono::seconds(30));
  ASSERT_EQ(underscore.exit_code, 0) << underscore.err;
  EXPECT_NE(underscore.out.find("[x0] rank 0 line 1"), std::string::npos) << underscore.out;
}

TEST(Logs, NoBrokenLinesFromEightRanks) {
  RunResult r = run_ctrun(
      {"--nproc-per-node=8", "--tee", "3", "--log-dir", "/dev/null", "--no-python", worker_script("chatter.sh")},
      {{"LINES", "300"}}, std::chrono::seconds(60));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::regex line_re(R"(\[default([0-7])\]:rank \1 line (\d+) a{58} end)");
  std::map<int, int> per_rank;
  for (const auto& line : lines_of(r.out)) {
    std::smatch m;
    ASSERT_TRUE(std::regex_match(line, m, line_re)) << "broken line: '" << line << "'";
    per_rank[std::stoi(m[1])]++;
  }
  EXPECT_EQ(per_rank.size(), 8u);
  for (const auto& [rank, n] : per_rank) EXPECT_EQ(n, 300) << "rank " << rank;
}

TEST(Logs, DuplicateFilters) {
  std::string dir = fresh_dir("logs_dup");
  RunResult r =
      run_ctrun({"--nproc-per-node=2", "--rdzv-id", "d", "--log-dir", dir, "--tee", "3", "--duplicate-stdout-filters",
                 "line 2 ", "--duplicate-stderr-filters", "err from", "--no-python", worker_script("chatter.sh")},
                {{"LINES", "3"}}, std::chrono::seconds(30));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string run = run_dir(dir, "d");
  auto filtered = lines_of(read_file(run + "/attempt_0/filtered_stdout.log"));
  EXPECT_EQ(filtered.size(), 2u);
  for (const auto& l : filtered) EXPECT_NE(l.find("line 2 "), std::string::npos);
  EXPECT_EQ(lines_of(read_file(run + "/attempt_0/filtered_stderr.log")).size(), 2u);
}

TEST(Logs, EventLogAndOwnErrorFile) {
  std::string dir = fresh_dir("events");
  std::string events = dir + "/events.jsonl";
  std::string own_error = dir + "/ctrun_error.json";
  RunResult r = run_ctrun({"--nproc-per-node=2", "--max-restarts", "1", "--event-log", events, "--no-python",
                           worker_script("restart_once.sh")},
                          {{"SUCCEED_AT", "5"}, {"TORCHELASTIC_ERROR_FILE", own_error}}, std::chrono::seconds(30));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  std::vector<std::string> names;
  for (const auto& line : lines_of(read_file(events))) {
    auto ev = nlohmann::json::parse(line);
    EXPECT_TRUE(ev.contains("time"));
    names.push_back(ev["event"]);
  }
  auto count = [&](const std::string& n) { return std::count(names.begin(), names.end(), n); };
  EXPECT_EQ(count("agent_start"), 1);
  EXPECT_EQ(count("rendezvous"), 2);
  EXPECT_EQ(count("worker_start"), 4);
  EXPECT_EQ(count("worker_exit"), 4);
  EXPECT_EQ(count("restart"), 1);
  EXPECT_EQ(count("failed"), 1);
  EXPECT_EQ(names.back(), "shutdown");
  auto err = nlohmann::json::parse(read_file(own_error));
  EXPECT_EQ(err["message"]["errorCode"], 4);
}

}  // namespace
}  // namespace ctrun::agent::test
