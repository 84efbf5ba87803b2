// The multi-host launcher's pure parts: hostfiles, --include/--exclude, the remote command and the launch plan.
#include <gtest/gtest.h>

#include <algorithm>

#include "agent/config/cli.hpp"
#include "agent/multihost/hostfile.hpp"
#include "agent/multihost/launcher.hpp"
#include "agent/multihost/remote_command.hpp"
#include "agent/multihost/stdin_watch.hpp"

namespace ctrun::agent::multihost {
namespace {

using S = std::vector<std::string>;

std::vector<std::string> names(const std::vector<Host>& hosts) {
  std::vector<std::string> out;
  for (const auto& h : hosts) out.push_back(h.name);
  return out;
}

TEST(Hostfile, Parses) {
  auto hosts = parse_hostfile("# cluster\n\nworker-1 slots=4\nworker-2   slots=2 # spare\n10.0.0.3\n", "hf");
  EXPECT_EQ(names(hosts), (S{"worker-1", "worker-2", "10.0.0.3"}));
  EXPECT_EQ(hosts[0].slots, 4);
  EXPECT_EQ(hosts[1].slots, 2);
  EXPECT_FALSE(hosts[2].slots);
  EXPECT_EQ(parse_hostfile("a slots=1 max_slots=4\n", "hf")[0].slots, 1);
}

TEST(Hostfile, Errors) {
  for (const char* bad :
       {"", "# only comments\n", "a slots=x\n", "a slots=0\n", "a gpus=2\n", "a\na\n", "-oProxy\n", "a;b\n"}) {
    EXPECT_THROW(parse_hostfile(bad, "hf"), std::invalid_argument) << bad;
  }
  try {
    parse_hostfile("a slots=2\nb slots=two\n", "my.hosts");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("my.hosts:2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(read_hostfile("/nonexistent/hostfile"), std::invalid_argument);
}

TEST(Hostfile, HostList) {
  auto hosts = parse_host_list("a,b:2,c");
  EXPECT_EQ(names(hosts), (S{"a", "b", "c"}));
  EXPECT_EQ(hosts[1].slots, 2);
  EXPECT_THROW(parse_host_list("a,,b"), std::invalid_argument);
  EXPECT_THROW(parse_host_list("a:0"), std::invalid_argument);
}

TEST(Hostfile, IncludeExclude) {
  auto all = parse_hostfile("h1 slots=4\nh2 slots=4\nh3 slots=4\n", "hf");
  auto inc = filter_hosts(all, std::string("h1:0,2@h3"), std::nullopt);
  EXPECT_EQ(names(inc), (S{"h1", "h3"}));
  EXPECT_EQ(inc[0].slot_ids, (std::vector<int>{0, 2}));
  EXPECT_TRUE(inc[0].slots_filtered);
  EXPECT_FALSE(inc[1].slots_filtered);
  auto exc = filter_hosts(all, std::nullopt, std::string("h1:1@h3"));
  EXPECT_EQ(names(exc), (S{"h1", "h2"}));
  EXPECT_EQ(exc[0].slot_ids, (std::vector<int>{0, 2, 3}));
  EXPECT_EQ(names(filter_hosts(all, std::nullopt, std::nullopt)), (S{"h1", "h2", "h3"}));
  EXPECT_THROW(filter_hosts(all, std::string("h1"), std::string("h2")), std::invalid_argument);
  EXPECT_THROW(filter_hosts(all, std::string("h9"), std::nullopt), std::invalid_argument);
  EXPECT_THROW(filter_hosts(all, std::string("h1:4"), std::nullopt), std::invalid_argument);
  EXPECT_THROW(filter_hosts(all, std::nullopt, std::string("h1@h2@h3")), std::invalid_argument);
  EXPECT_THROW(filter_hosts(parse_host_list("a,b"), std::string("a:0"), std::nullopt), std::invalid_argument);
}

TEST(RemoteCommand, QuotesAndEnv) {
  EXPECT_EQ(shell_quote("it's"), "'it'\\''s'");
  EXPECT_EQ(remote_shell_command("/w d", {{"A", "x y"}}, {"ctrun", "--x=$HOME", "t.py"}),
            "cd '/w d' && exec env 'A=x y' 'ctrun' '--x=$HOME' 't.py'");
  auto vars = parse_env_file("# c\nNCCL_DEBUG=INFO\n export PATH_X=/a:/b\n\nEMPTY=\nNCCL_DEBUG=WARN\n", "f");
  EXPECT_EQ(vars, (EnvVars{{"NCCL_DEBUG", "WARN"}, {"PATH_X", "/a:/b"}, {"EMPTY", ""}}));
  EXPECT_THROW(parse_env_file("no equals sign\n", "f"), std::invalid_argument);
  EXPECT_THROW(parse_env_file("1X=2\n", "f"), std::invalid_argument);
  auto env = [](const std::string& n) -> std::optional<std::string> {
    if (n == "HERE") return std::string("v");
    return std::nullopt;
  };
  EXPECT_EQ(parse_exports("A=1,HERE,B=x,,y", env), (EnvVars{{"A", "1"}, {"HERE", "v"}, {"B", "x,y"}}));
  EXPECT_THROW(parse_exports("NOT_HERE", env), std::invalid_argument);
  EXPECT_THROW(parse_exports("A-B=1", env), std::invalid_argument);
}

TEST(RemoteCommand, StdinWatchFlagRemovedOnce) {
  EXPECT_EQ(without_stdin_watch_flag({"--exit-on-stdin-close", "--nnodes", "2", "t.py", "--exit-on-stdin-close"}),
            (S{"--nnodes", "2", "t.py", "--exit-on-stdin-close"}));
  EXPECT_EQ(without_stdin_watch_flag({"--exit_on_stdin_close", "t.py"}), (S{"t.py"}));
}

bool has_pair(const S& argv, const std::string& a, const std::string& b) {
  for (size_t i = 0; i + 1 < argv.size(); ++i) {
    if (argv[i] == a && argv[i + 1] == b) return true;
  }
  return false;
}

TEST(Plan, C10dFromTheFirstHost) {
  auto cli = lex_command_line({"--hostfile", "hf", "--ssh", "ssh -p 2", "--export", "A=1", "--max-restarts", "2",
                               "--propagate-exit-code", "--secret-file", "/home/me/job.key", "train.py", "--lr", "0.1"});
  auto hosts = filter_hosts(parse_hostfile("h1 slots=2\nh2 slots=4\nh3\n", "hf"), std::nullopt, std::string("h2:0"));
  auto plan = plan_launch(cli, hosts, "/opt/ctrun", "run-7", {{"X", "1"}});
  ASSERT_EQ(plan.size(), 3u);
  for (const auto& p : plan) {
    EXPECT_EQ(p.argv[0], "/opt/ctrun");
    EXPECT_EQ(p.argv[1], "--exit-on-stdin-close");
    // The job's secret comes over ssh's stdin, never in an argv: the user's file is read by the launcher.
    EXPECT_TRUE(has_pair(p.argv, "--secret-file", "-"));
    EXPECT_TRUE(has_pair(p.argv, "--rdzv-backend", "c10d"));
    EXPECT_TRUE(has_pair(p.argv, "--rdzv-endpoint", "h1:29400"));
    EXPECT_TRUE(has_pair(p.argv, "--rdzv-id", "run-7"));
    EXPECT_TRUE(has_pair(p.argv, "--nnodes", "3"));
    EXPECT_TRUE(has_pair(p.argv, "--local-addr", p.host));
    EXPECT_NE(std::find(p.argv.begin(), p.argv.end(), "--max-restarts=2"), p.argv.end());
    EXPECT_NE(std::find(p.argv.begin(), p.argv.end(), "--propagate-exit-code"), p.argv.end());
    for (const auto& a : p.argv) {  // launcher-only flags stay here
      EXPECT_EQ(a.find("--ssh"), std::string::npos);
      EXPECT_EQ(a.find("--export"), std::string::npos);
      EXPECT_EQ(a.find("--hostfile"), std::string::npos);
      EXPECT_EQ(a.find("job.key"), std::string::npos);
    }
    EXPECT_EQ(S(p.argv.end() - 4, p.argv.end()), (S{"--", "train.py", "--lr", "0.1"}));
    EXPECT_EQ(p.env.front(), (std::pair<std::string, std::string>{"X", "1"}));
  }
  EXPECT_EQ(plan[0].nproc, 2);
  EXPECT_TRUE(has_pair(plan[1].argv, "--nproc-per-node", "3"));  // h2 without slot 0
  EXPECT_NE(std::find(plan[1].env.begin(), plan[1].env.end(),
                      std::pair<std::string, std::string>{"CUDA_VISIBLE_DEVICES", "1,2,3"}),
            plan[1].env.end());
  EXPECT_EQ(plan[2].nproc, 0);  // no slots: the host's own default
}

TEST(Plan, StaticRanksInFileOrderAndExplicitFlagsWin) {
  auto cli = lex_command_line({"--hosts", "b,a", "--rdzv-backend", "static", "--master-port", "1234",
                               "--nproc-per-node", "2", "--rdzv-id", "mine", "t.py"});
  auto plan = plan_launch(cli, parse_host_list("b,a"), "ctrun", "ignored", {});
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_TRUE(has_pair(plan[0].argv, "--node-rank", "0"));
  EXPECT_TRUE(has_pair(plan[1].argv, "--node-rank", "1"));
  for (const auto& p : plan) {
    EXPECT_TRUE(has_pair(p.argv, "--master-addr", "b"));
    EXPECT_NE(std::find(p.argv.begin(), p.argv.end(), "--master-port=1234"), p.argv.end());
    EXPECT_NE(std::find(p.argv.begin(), p.argv.end(), "--nproc-per-node=2"), p.argv.end());
    EXPECT_NE(std::find(p.argv.begin(), p.argv.end(), "--rdzv-id=mine"), p.argv.end());
    EXPECT_FALSE(has_pair(p.argv, "--rdzv-id", "ignored"));
  }
  EXPECT_THROW(plan_launch(lex_command_line({"--hosts", "a", "--rdzv-backend", "etcd", "t.py"}), parse_host_list("a"),
                           "ctrun", "r", {}),
               UsageError);
}

}  // namespace
}  // namespace ctrun::agent::multihost
