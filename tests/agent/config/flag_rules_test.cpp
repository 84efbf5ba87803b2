// Each rule between flags, by name: a config that breaks it, and only it, is refused with its message; the same
// combination on the command line exits 2 (UsageError) before anything starts.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "agent/config/cli.hpp"
#include "agent/config/flag_rules.hpp"

namespace ctrun::agent {
namespace {

struct Case {
  std::function<void(LaunchConfig&)> break_it;
  std::vector<std::string> args;  // the same on the command line
  std::string message;            // a piece of the complaint
};

const std::map<std::string, Case>& cases() {
  using B = rdzv::Backend;
  static const std::map<std::string, Case> all = {
      {"module_or_no_python",
       {[](LaunchConfig& c) { c.workers.module = c.workers.no_python = true; },
        {"-m", "--no-python", "t"},
        "'--no-python'"}},
      {"module_or_run_path",
       {[](LaunchConfig& c) { c.workers.module = c.workers.run_path = true; },
        {"-m", "--run-path", "t"},
        "'--run-path'"}},
      {"static_needs_fixed_nnodes",
       {[](LaunchConfig& c) { c.rdzv.max_nodes = 2; }, {"--nnodes", "1:2", "t"}, "MIN:MAX needs --rdzv-backend c10d"}},
      {"static_node_rank_below_nnodes",
       {[](LaunchConfig& c) { c.rdzv.node_rank = 1; }, {"--node-rank", "1", "t"}, "must be smaller than --nnodes 1"}},
      {"etcd_needs_endpoint",
       {[](LaunchConfig& c) { c.rdzv.backend = B::kEtcd; }, {"--rdzv-backend", "etcd", "t"}, "etcd needs"}},
      {"c10d_nodes_need_endpoint",
       {[](LaunchConfig& c) {
          c.rdzv.backend = B::kC10d;
          c.rdzv.max_nodes = 2;
        },
        {"--rdzv-backend", "c10d", "--nnodes", "2", "t"},
        "c10d with several nodes needs --rdzv-endpoint"}},
      {"hostfile_or_hosts",
       {[](LaunchConfig& c) {
          c.multihost.hostfile.emplace("h");
          c.multihost.hosts.emplace("h");
        },
        {"--hostfile", "/h", "--hosts", "a", "t"},
        "either --hostfile or --hosts"}},
      {"include_exclude_need_hosts",
       {[](LaunchConfig& c) { c.multihost.exclude.emplace("a"); }, {"--exclude", "a", "t"}, "--include/--exclude"}},
      {"standalone_is_one_node",
       {[](LaunchConfig& c) {
          c.rdzv.standalone = true;
          c.multihost.hosts.emplace("a");
        },
        {"--standalone", "--hosts", "a", "t"},
        "--standalone is one node"}},
  };
  return all;
}

TEST(FlagRules, EveryRuleHasACase) {
  for (const auto& rule : flag_rules()) EXPECT_EQ(cases().count(std::string(rule.name)), 1u) << rule.name;
  EXPECT_EQ(cases().size(), flag_rules().size());
}

TEST(FlagRules, TheDefaultsKeepEveryRule) {
  const LaunchConfig c;
  for (const auto& rule : flag_rules()) EXPECT_FALSE(rule.broken(c)) << rule.name;
  EXPECT_NO_THROW(check_flag_rules(c));
}

TEST(FlagRules, EachCaseBreaksItsRuleAndNoOther) {
  for (const auto& [name, rule_case] : cases()) {
    LaunchConfig c;
    rule_case.break_it(c);
    for (const auto& rule : flag_rules()) {
      auto complaint = rule.broken(c);
      EXPECT_EQ(complaint.has_value(), rule.name == name) << name << " vs " << rule.name;
      if (complaint && rule.name == name) {
        EXPECT_NE(complaint->find(rule_case.message), std::string::npos) << *complaint;
      }
    }
    EXPECT_THROW(check_flag_rules(c), UsageError) << name;
  }
}

TEST(FlagRules, TheCommandLineIsRefusedWithTheRulesMessage) {
  auto no_env = [](const std::string&) -> std::optional<std::string> { return std::nullopt; };
  for (const auto& [name, rule_case] : cases()) {
    try {
      parse_command_line(rule_case.args, no_env);
      ADD_FAILURE() << name << ": accepted";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(rule_case.message), std::string::npos) << name << ": " << e.what();
    }
  }
}

}  // namespace
}  // namespace ctrun::agent
