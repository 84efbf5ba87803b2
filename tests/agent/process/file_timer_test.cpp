// The file timer's pure parts: torch's request lines and the table's expiry rules (which scope, which signal,
// release, one verdict per pid). The FIFO server and a real torch worker are tested in tests/agent/torch_test.cpp.
#include "agent/process/file_timer.hpp"

#include <gtest/gtest.h>

#include <string>

namespace ctrun::agent {
namespace {

FileTimerRequest req(pid_t pid, const std::string& scope, double exp, int sig) { return {pid, scope, exp, sig}; }

TEST(FileTimerRequest, ParsesTorchsLine) {
  // As torch's FileTimerRequest.to_json() writes it (1.13 and 2.x).
  auto r = parse_file_timer_request(
      R"({"version": 1, "pid": 4711, "scope_id": "train_step", "expiration_time": 1764160000.25, "signal": 9})",
      nullptr);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->pid, 4711);
  EXPECT_EQ(r->scope_id, "train_step");
  EXPECT_DOUBLE_EQ(r->expiration_time, 1764160000.25);
  EXPECT_EQ(r->signal, 9);
  auto release = parse_file_timer_request(
      R"({"version": 1, "pid": 4711, "scope_id": "train_step", "expiration_time": -1, "signal": 0})", nullptr);
  ASSERT_TRUE(release);
  EXPECT_LT(release->expiration_time, 0);
}

TEST(FileTimerRequest, RejectsWhatIsNotAVersionOneRequest) {
  std::string why;
  for (const char* bad : {"", "garbage", "[]", R"({"version": 2, "pid": 1, "scope_id": "s", "expiration_time": 1})",
                          R"({"version": 1, "scope_id": "s", "expiration_time": 1})",
                          R"({"version": 1, "pid": -3, "scope_id": "s", "expiration_time": 1})",
                          R"({"version": 1, "pid": 1, "scope_id": 7, "expiration_time": 1})",
                          R"({"version": 1, "pid": 1, "scope_id": "s"})"}) {
    EXPECT_FALSE(parse_file_timer_request(bad, &why)) << bad;
    EXPECT_FALSE(why.empty()) << bad;
  }
}

TEST(FileTimerTable, ExpiresOnlyPastDeadlinesAndClearsTheReapedPid) {
  FileTimerTable t;
  t.apply(req(10, "a", 100.0, 9));
  t.apply(req(11, "b", 200.0, 9));
  EXPECT_TRUE(t.expire(99.9).empty());
  auto e = t.expire(100.5);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0].pid, 10);
  EXPECT_EQ(e[0].scope_id, "a");
  EXPECT_EQ(e[0].signal, 9);
  EXPECT_NEAR(e[0].overdue, 0.5, 1e-9);
  EXPECT_EQ(t.size(), 1u);
  ASSERT_TRUE(t.next_deadline());
  EXPECT_DOUBLE_EQ(*t.next_deadline(), 200.0);
}

TEST(FileTimerTable, ReleaseRemovesTheScopeAndReacquireReplacesIt) {
  FileTimerTable t;
  t.apply(req(10, "a", 100.0, 9));
  t.apply(req(10, "a", -1, 0));
  EXPECT_TRUE(t.expire(1000.0).empty());
  t.apply(req(10, "a", 100.0, 9));
  t.apply(req(10, "a", 300.0, 9));  // the same scope again: the newer deadline counts
  EXPECT_TRUE(t.expire(200.0).empty());
  EXPECT_EQ(t.expire(300.0).size(), 1u);
}

TEST(FileTimerTable, OneVerdictPerPidWithTheEarliestScopeThatCarriesASignal) {
  FileTimerTable t;
  t.apply(req(10, "no_signal", 50.0, 0));
  t.apply(req(10, "late", 90.0, 15));
  t.apply(req(10, "early", 80.0, 9));
  t.apply(req(12, "report_only", 70.0, 0));
  auto e = t.expire(100.0);
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[0].pid, 10);
  EXPECT_EQ(e[0].scope_id, "early");
  EXPECT_EQ(e[0].signal, 9);
  EXPECT_EQ(e[1].pid, 12);
  EXPECT_EQ(e[1].signal, 0);  // reported, never signalled
  EXPECT_EQ(t.size(), 0u);
}

TEST(FileTimerTable, ForgetDropsEveryScopeOfAPid) {
  FileTimerTable t;
  t.apply(req(10, "a", 1.0, 9));
  t.apply(req(10, "b", 2.0, 9));
  t.apply(req(11, "a", 3.0, 9));
  t.forget(10);
  EXPECT_EQ(t.size(), 1u);
  EXPECT_EQ(t.expire(10.0).front().pid, 11);
}

TEST(FileTimerPath, DefaultsToTorchsPattern) {
  const std::string p = default_file_timer_path();
  EXPECT_EQ(p.rfind("/tmp/watchdog_timer_", 0), 0u) << p;
  EXPECT_NE(p, default_file_timer_path());
}

}  // namespace
}  // namespace ctrun::agent
