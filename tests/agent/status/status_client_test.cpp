// `ctrun --status`'s target resolution (agent/status/status_client): newest run first, run dir, log dir, HOST:PORT, bad
// targets; and its exit codes. The end-to-end case (a live job's table) is in hang/ctrun_hang_test.cpp.
#include "agent/status/status_client.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/http/server.hpp"

namespace ctrun::agent {
namespace {

namespace fs = std::filesystem;

fs::path fresh(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("ctrun_status_client_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void write_port(const fs::path& run_dir, const std::string& text, int age_s) {
  fs::create_directories(run_dir);
  std::ofstream(run_dir / "status_port") << text;
  fs::last_write_time(run_dir / "status_port", fs::file_time_type::clock::now() - std::chrono::seconds(age_s));
}

TEST(StatusClient, NewestRunFirstUnderTheDefaultBaseAndALogDir) {
  const fs::path tmp = fresh("base");
  write_port(tmp / "torchelastic_a" / "old_run", "4001\n", 100);
  write_port(tmp / "torchelastic_b" / "new_run", "4002\n", 1);
  write_port(tmp / "torchelastic_b" / "half_written", "", 0);  // skipped: no port yet
  write_port(tmp / "other" / "run", "4003\n", 0);              // not a torchelastic_ base
  auto t = status_targets(std::nullopt, tmp.string());
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].port, 4002);
  EXPECT_EQ(t[0].host, "127.0.0.1");
  EXPECT_EQ(t[1].port, 4001);
  EXPECT_EQ(t[1].source, (tmp / "torchelastic_a" / "old_run" / "status_port").string());
  // A --log-dir: its runs; a run dir: its own file only.
  t = status_targets((tmp / "torchelastic_b").string(), "/nonexistent");
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].port, 4002);
  t = status_targets((tmp / "torchelastic_a" / "old_run").string(), "/nonexistent");
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].port, 4001);
  fs::remove_all(tmp);
}

TEST(StatusClient, HostPortAndBadTargets) {
  auto t = status_targets("node7:29555", "/tmp");
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].host, "node7");
  EXPECT_EQ(t[0].port, 29555);
  t = status_targets("[::1]:80", "/tmp");
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].host, "::1");
  for (const char* bad : {"/no/such/dir", "host:", "host:0", "host:99999", "host:12ab", ":80"}) {
    EXPECT_THROW(status_targets(std::string(bad), "/tmp"), UsageError) << bad;
  }
}

TEST(StatusClient, ExitCodes) {
  const fs::path tmp = fresh("exit");
  EnvLookup env = [&](const std::string& name) -> std::optional<std::string> {
    if (name == "TMPDIR") return tmp.string();
    return std::nullopt;
  };
  EXPECT_EQ(status_main({"--bogus"}, env), 2);
  EXPECT_EQ(status_main({"a", "b"}, env), 2);
  EXPECT_EQ(status_main({"/no/such/dir"}, env), 2);
  EXPECT_EQ(status_main({}, env), 1) << "nothing runs under an empty base";
  EXPECT_EQ(status_main({"--help"}, env), 0);
  EXPECT_EQ(status_main({"--json", "--open"}, env), 2);
  EXPECT_EQ(status_main({"--stacks", "--url"}, env), 2);
  fs::remove_all(tmp);
}

// --open: the page of the job that answers, in $BROWSER (here a script that writes down what it was given).
TEST(StatusClient, OpenHandsThePagesAddressToTheBrowser) {
  const fs::path tmp = fresh("open");
  http::Server job("127.0.0.1", 0, {{"/status.json", http::answer_now([] { return http::Reply{"application/json", "{}"}; })}});
  write_port(tmp / "torchelastic_x" / "run", std::to_string(job.port()) + "\n", 0);
  const fs::path browser = tmp / "browser.sh", opened = tmp / "opened";
  std::ofstream(browser) << "#!/bin/sh\necho \"$1\" > " << opened.string() << "\n";
  fs::permissions(browser, fs::perms::owner_all);
  EnvLookup env = [&](const std::string& name) -> std::optional<std::string> {
    if (name == "TMPDIR") return tmp.string();
    if (name == "BROWSER") return browser.string();
    return std::nullopt;
  };
  EXPECT_EQ(status_main({"--open"}, env), 0);
  const std::string url = "http://127.0.0.1:" + std::to_string(job.port()) + "/";
  std::string got;
  for (int i = 0; i < 250 && got.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::ifstream in(opened);
    std::getline(in, got);
  }
  EXPECT_EQ(got, url);
  EXPECT_EQ(status_main({"--url", (tmp / "torchelastic_x").string()}, env), 0);
  fs::remove_all(tmp);
}

}  // namespace
}  // namespace ctrun::agent
