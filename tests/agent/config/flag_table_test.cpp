// The flag table binds every flag: its default fills LaunchConfig, its parser fills the field, and one resolver
// orders the sources (command line > --config file > PET_* > derived > torch's variable > default).
#include <gtest/gtest.h>

#include <csignal>

#include <map>
#include <set>
#include <string>
#include <vector>

#include "agent/config/cli.hpp"
#include "agent/config/flag_parsers.hpp"
#include "agent/config/flag_sources.hpp"
#include "agent/config/flags.hpp"
#include "tests/agent/env_of.hpp"

namespace ctrun::agent {
namespace {

using test::env_of;

using Vars = std::map<std::string, std::string>;

CommandLine command_line(Vars values) {
  CommandLine cli;
  cli.values = std::move(values);
  cli.script = "t.py";
  return cli;
}

const FlagSpec& flag(const char* dest) {
  const FlagSpec* f = find_flag(dest);
  if (f == nullptr) throw std::logic_error(dest);
  return *f;
}

TEST(FlagTable, LaunchConfigDefaultsAreTheTables) {
  const LaunchConfig c;
  EXPECT_EQ(c.rdzv.min_nodes, 1);
  EXPECT_EQ(c.rdzv.max_nodes, 1);
  EXPECT_EQ(c.workers.nproc_per_node_spec, "1");
  EXPECT_EQ(c.workers.nproc_per_node, 1);
  EXPECT_EQ(c.rdzv.backend, rdzv::Backend::kStatic);
  EXPECT_EQ(c.rdzv.id, "none");
  EXPECT_DOUBLE_EQ(c.restarts.monitor_interval, 0.1);
  EXPECT_DOUBLE_EQ(c.shutdown.timeout, 30.0);
  EXPECT_DOUBLE_EQ(c.shutdown.exit_barrier_timeout, 300.0);
  EXPECT_DOUBLE_EQ(c.hang.report_after, 300.0);
  EXPECT_EQ(c.workers.start_method, "spawn");
  EXPECT_EQ(c.logs.event_log_handler, "null");
  EXPECT_EQ(c.workers.role, "default");
  EXPECT_EQ(c.rdzv.master_addr, "127.0.0.1");
  EXPECT_FALSE(c.rdzv.master_port);
  EXPECT_EQ(c.shutdown.signal_numbers, (std::vector<int>{SIGTERM, SIGINT, SIGHUP, SIGQUIT}));
  EXPECT_EQ(c.shutdown.forwarded_signal_numbers, (std::vector<int>{SIGUSR1, SIGUSR2}));
  EXPECT_EQ(c.workers.numa_binding, NumaBinding::kNone);
  EXPECT_EQ(c.workers.cpu_bind, CpuBind::kNone);
  EXPECT_EQ(c.multihost.ssh, "ssh -o BatchMode=yes -o ConnectTimeout=10");
  // What the command line gives without flags is exactly the default-constructed config.
  const LaunchConfig parsed = parse_command_line({"t.py"}, env_of({}));
  EXPECT_DOUBLE_EQ(parsed.restarts.monitor_interval, c.restarts.monitor_interval);
  EXPECT_EQ(parsed.shutdown.signal_numbers, c.shutdown.signal_numbers);
  EXPECT_EQ(parsed.rdzv.id, c.rdzv.id);
}

TEST(FlagTable, EveryRowBindsAFieldAndItsDefaultParses) {
  const std::set<std::string_view> steer_the_pipeline = {"config", "no_slurm"};
  for (const auto& f : flag_table()) {
    if (steer_the_pipeline.count(f.dest)) {
      EXPECT_EQ(f.bind, nullptr) << f.dest;
      continue;
    }
    ASSERT_NE(f.bind, nullptr) << f.dest;
    LaunchConfig c;
    if (f.default_value) {
      EXPECT_NO_THROW(f.bind(c, std::string(*f.default_value))) << f.dest;
    }
    EXPECT_FALSE(f.help.empty()) << f.dest;
  }
}

TEST(FlagTable, HelpShowsTheTablesDefaultsAndTheMonitorIntervalsRealUse) {
  std::string help;
  try {
    lex_command_line({"--help"});
  } catch (const HelpRequested& h) {
    help = h.what();
  }
  EXPECT_NE(help.find("[default: 0.1]"), std::string::npos);
  EXPECT_NE(help.find("membership"), std::string::npos) << "--monitor-interval paces the membership checks";
  EXPECT_EQ(help.find("ctrun reacts to worker exits as they happen"), std::string::npos);
}

TEST(FlagSources, CommandLineThenFileThenPetThenDerivedThenDefault) {
  const FlagSpec& role = flag("role");
  const Vars pet = {{"PET_ROLE", "pet"}};
  FlagSources all(command_line({{"role", "cli"}}), {{"role", "file"}}, env_of(pet));
  EXPECT_EQ(all.resolve(role)->text, "cli");
  EXPECT_EQ(FlagSources(command_line({}), {{"role", "file"}}, env_of(pet)).resolve(role)->text, "file");
  FlagSources below_pet(command_line({}), {}, env_of(pet));
  below_pet.set_derived({{"role", FlagText{"derived", "SLURM_X"}}});
  EXPECT_EQ(below_pet.resolve(role)->text, "pet");
  EXPECT_EQ(below_pet.resolve(role)->origin, "PET_ROLE");
  FlagSources derived(command_line({}), {}, env_of({}));
  derived.set_derived({{"role", FlagText{"derived", "SLURM_X"}}});
  EXPECT_EQ(derived.resolve(role)->text, "derived");
  EXPECT_FALSE(derived.given("role"));  // derived values are not what the user said
  EXPECT_EQ(FlagSources(command_line({}), {}, env_of({})).resolve(role)->text, "default");
}

TEST(FlagSources, TorchsOwnVariableSitsBetweenPetAndTheDefault) {
  const FlagSpec& timeout = flag("shutdown_timeout");
  const Vars torch = {{"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "7"}};
  EXPECT_EQ(FlagSources(command_line({}), {}, env_of(torch)).resolve(timeout)->text, "7");
  Vars both = torch;
  both["PET_SHUTDOWN_TIMEOUT"] = "3";
  EXPECT_EQ(FlagSources(command_line({}), {}, env_of(both)).resolve(timeout)->text, "3");
  EXPECT_EQ(FlagSources(command_line({}), {}, env_of({})).resolve(timeout)->text, "30");
}

TEST(FlagSources, FlagsWithoutPetIgnoreTheirVariable) {
  FlagSources s(command_line({}), {}, env_of({{"PET_NUMA_BINDING", "node"}, {"PET_HOSTFILE", "/h"}}));
  EXPECT_FALSE(s.resolve(flag("numa_binding")));
  EXPECT_FALSE(s.given("hostfile"));
}

TEST(FlagSources, ABadValueNamesTheFlagAndWhereItCameFrom) {
  try {
    parse_command_line({"t.py"}, env_of({{"PET_MAX_RESTARTS", "many"}}));
    FAIL() << "accepted PET_MAX_RESTARTS=many";
  } catch (const UsageError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("--max-restarts"), std::string::npos) << what;
    EXPECT_NE(what.find("PET_MAX_RESTARTS"), std::string::npos) << what;
    EXPECT_NE(what.find("'many'"), std::string::npos) << what;
  }
  try {
    parse_command_line({"--max-restarts", "-1", "t.py"}, env_of({}));
    FAIL() << "accepted --max-restarts -1";
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()), "argument --max-restarts: must be >= 0");
  }
}

TEST(FlagSources, GivenBooleansFollowTheOneRule) {
  EXPECT_TRUE(FlagSources(command_line({}), {}, env_of({{"PET_NO_SLURM", " +1"}})).given_true("no_slurm"));
  EXPECT_FALSE(FlagSources(command_line({}), {}, env_of({{"PET_NO_SLURM", "false"}})).given_true("no_slurm"));
  EXPECT_FALSE(FlagSources(command_line({}), {{"no_slurm", "0"}}, env_of({})).given_true("no_slurm"));
  EXPECT_THROW(FlagSources(command_line({}), {}, env_of({{"PET_NO_SLURM", "yes"}})).given_true("no_slurm"), UsageError);
}

}  // namespace
}  // namespace ctrun::agent
