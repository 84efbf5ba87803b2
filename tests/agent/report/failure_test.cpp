// The failure summary, byte for byte in torchrun's shape, and error files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <csignal>
#include <fstream>

#include <nlohmann/json.hpp>

#include "agent/report/error_file.hpp"
#include "agent/report/failure.hpp"

namespace ctrun::agent {
namespace {

TEST(Summary, SingleFailureShape) {
  auto f = make_failure(1, 1, 4242, 3, "/nonexistent/error.json", 1700000000, 5);
  std::string s = format_failure_summary("train.py", {f}, "node1");
  char when[32];
  std::time_t t = 1700000000;
  std::strftime(when, sizeof when, "%Y-%m-%d_%H:%M:%S", std::localtime(&t));
  std::string body = std::string("[0]:\n  time      : ") + when +
                     "\n  host      : node1\n  rank      : 1 (local_rank: 1)\n  exitcode  : 3 (pid: 4242)\n"
                     "  error_file: <N/A>\n  traceback : To enable traceback see: "
                     "https://pytorch.org/docs/stable/elastic/errors.html";
  std::string border(60, '='), section(60, '-');
  std::string expected = "\n" + border + "\ntrain.py FAILED\n" + section + "\nFailures:\n  <NO_OTHER_FAILURES>\n" +
                         section + "\nRoot Cause (first observed failure):\n" + body + "\n" + border;
  EXPECT_EQ(s, expected);
}

TEST(Summary, SignalNameAndRootCauseOrder) {
  auto a = make_failure(0, 0, 10, -15, "", 100, 20);
  auto b = make_failure(1, 1, 11, -11, "", 100, 10);  // same second, seen first: root cause
  std::string s = format_failure_summary("x", {a, b}, "h");
  EXPECT_EQ(root_cause_index({a, b}), 1u);
  EXPECT_NE(s.find("exitcode  : -11 (pid: 11) (SIGSEGV)"), std::string::npos) << s;
  EXPECT_NE(s.find("traceback : Signal 11 (SIGSEGV) received by PID 11"), std::string::npos);
  auto root = s.find("Root Cause");
  EXPECT_GT(s.find("rank      : 1 (local_rank: 1)"), root);
  EXPECT_LT(s.find("rank      : 0 (local_rank: 0)"), root);
  // Narrow failures: the border is as wide as the widest line, capped at 60.
  auto c = make_failure(0, 0, 1, 1, "", 0, 0);
  c.message = "m";
  std::string narrow = format_failure_summary("t", {c}, "h");
  EXPECT_EQ(narrow.substr(0, 2), "\n=");
}

TEST(ErrorFile, RecordFormatTracebackIsIndented) {
  std::string path = ::testing::TempDir() + "/ctrun_err_" + std::to_string(::getpid()) + ".json";
  nlohmann::json doc = {
      {"message",
       {{"message", "ValueError: boom"},
        {"extraInfo", {{"py_callstack", "Traceback:\n  line\nValueError: boom"}, {"timestamp", "1700000001"}}}}}};
  std::ofstream(path) << doc.dump();
  auto f = make_failure(0, 0, 1, 1, path, 5, 0);
  EXPECT_EQ(f.error_file, path);
  EXPECT_EQ(f.timestamp, 1700000001);
  EXPECT_EQ(f.message, "Traceback:\n    line\n  ValueError: boom");

  std::string own = ::testing::TempDir() + "/ctrun_own_" + std::to_string(::getpid()) + ".json";
  write_agent_error_file(own, path, 1, "summary");
  std::ifstream in(own);
  auto copied = nlohmann::json::parse(in);
  EXPECT_EQ(copied["message"]["errorCode"], 1);
  EXPECT_EQ(copied["message"]["message"], "ValueError: boom");
}

TEST(ErrorFile, LegacyAndMalformed) {
  std::string path = ::testing::TempDir() + "/ctrun_err2.json";
  std::ofstream(path) << R"({"message": "plain", "timestamp": 7})";
  auto d = read_worker_error_file(path);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->traceback, "plain");
  EXPECT_EQ(*d->timestamp, 7);
  std::ofstream(path, std::ios::trunc) << "not json";
  EXPECT_FALSE(read_worker_error_file(path));
  EXPECT_FALSE(read_worker_error_file(""));
}

}  // namespace
}  // namespace ctrun::agent
