// Flag values as torchrun reads them: --rdzv-conf trimmed around every key and value, and the one rule for a
// boolean given as text (PET_<NAME>, the --config file), the same wherever ctrun reads one.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "agent/config/cli.hpp"
#include "tests/agent/env_of.hpp"

namespace ctrun::agent {
namespace {

using test::env_of;

using Vars = std::map<std::string, std::string>;

LaunchConfig parse(std::vector<std::string> args, Vars env = {}) {
  return parse_command_line(args, env_of(std::move(env)));
}

// The least an srun step says: job, step, this node's id, the step's four nodes.
const Vars kSlurmStep = {{"SLURM_JOB_ID", "77"},
                         {"SLURM_STEP_ID", "1"},
                         {"SLURM_NODEID", "2"},
                         {"SLURM_STEP_NUM_NODES", "4"},
                         {"SLURM_STEP_NODELIST", "n[1-4]"}};

// torchrun strips every key and value of --rdzv-conf: a space after a comma must not hide the key behind it
// (" join_timeout" would be an unknown key, silently ignored, and the default timeout used instead).
TEST(FlagValues, RdzvConfKeysAndValuesAreTrimmedAsTorchrun) {
  const std::map<std::string, std::string> expected = {{"join_timeout", "3"}, {"read_timeout", "60"}};
  EXPECT_EQ(parse({"--rdzv-conf", "read_timeout=60, join_timeout=3", "t.py"}).rdzv.conf, expected);
  EXPECT_EQ(parse({"--rdzv-conf", " read_timeout = 60 ,join_timeout=3 ", "t.py"}).rdzv.conf, expected);
  EXPECT_EQ(parse({"t.py"}, {{"PET_RDZV_CONF", "read_timeout=60, join_timeout=3"}}).rdzv.conf, expected);
}

// Python's int() as torchrun's check_env applies it: bool(int(PET_<NAME>)).
TEST(FlagValues, EveryIntegerSpellingTorchrunAcceptsForABooleanPet) {
  for (const char* yes : {"1", "2", "-1", "+1", " 1", "1 ", "\t1\n", "01", "1_0", "10"}) {
    EXPECT_TRUE(parse({"t.py"}, {{"PET_NO_PYTHON", yes}}).workers.no_python) << "'" << yes << "'";
  }
  for (const char* no : {"0", "00", "-0", "+0", " 0 ", "0_0"}) {
    EXPECT_FALSE(parse({"t.py"}, {{"PET_NO_PYTHON", no}}).workers.no_python) << "'" << no << "'";
  }
}

// ctrun's leniency beside torchrun's integers (JSON and shell users write true/false): the same everywhere.
TEST(FlagValues, TrueAndFalseInAnyCaseAreBooleansToo) {
  for (const char* yes : {"true", "True", "TRUE"})
    EXPECT_TRUE(parse({"t.py"}, {{"PET_NO_PYTHON", yes}}).workers.no_python);
  for (const char* no : {"false", "False", "FALSE"})
    EXPECT_FALSE(parse({"t.py"}, {{"PET_NO_PYTHON", no}}).workers.no_python);
}

TEST(FlagValues, AnyOtherBooleanTextIsAUsageError) {
  for (const char* bad : {"yes", "no", "on", "1.0", "0x1", "_1", "1_", "1__0", "one"}) {
    EXPECT_THROW(parse({"t.py"}, {{"PET_NO_PYTHON", bad}}), UsageError) << "'" << bad << "'";
  }
}

// PET_NO_SLURM=false means what PET_NO_SLURM=0 means: Slurm's variables still give the defaults.
TEST(FlagValues, NoSlurmFalseKeepsSlurmDetectionOnLikeZero) {
  for (const char* off : {"0", "false", "False", " 0"}) {
    Vars env = kSlurmStep;
    env["PET_NO_SLURM"] = off;
    auto c = parse({"t.py"}, env);
    EXPECT_EQ(c.rdzv.max_nodes, 4) << off;
    EXPECT_EQ(c.rdzv.node_rank, 2) << off;
    EXPECT_NE(c.cluster_summary.find("Slurm"), std::string::npos) << off;
  }
  for (const char* on : {"1", "true", "+1"}) {
    Vars env = kSlurmStep;
    env["PET_NO_SLURM"] = on;
    auto c = parse({"t.py"}, env);
    EXPECT_EQ(c.rdzv.max_nodes, 1) << on;
    EXPECT_TRUE(c.cluster_summary.empty()) << on;
  }
}

// The same for PET_STANDALONE: false is not standalone, so the scheduler's variables still count.
TEST(FlagValues, StandaloneFalseKeepsSlurmDetectionOn) {
  Vars env = kSlurmStep;
  env["PET_STANDALONE"] = "false";
  auto c = parse({"t.py"}, env);
  EXPECT_FALSE(c.rdzv.standalone);
  EXPECT_EQ(c.rdzv.max_nodes, 4);
}

// --numa-binding: parsed once into what ctrun implements; torchrun's GPU-topology modes refused, never remapped.
TEST(FlagValues, NumaBindingNodeOrARefusalThatSaysWhy) {
  EXPECT_EQ(parse({"t.py"}).workers.numa_binding, NumaBinding::kNone);
  EXPECT_EQ(parse({"--numa-binding", "node", "t.py"}).workers.numa_binding, NumaBinding::kNode);
  for (const char* mode : {"socket", "exclusive", "core-complex"}) {
    try {
      parse({"--numa-binding", mode, "t.py"});
      ADD_FAILURE() << mode << " accepted";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("not supported by ctrun"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(parse({"--numa-binding", "nodes", "t.py"}), UsageError);
}

TEST(FlagValues, RdzvBackendParsedOnceIntoItsEnum) {
  EXPECT_EQ(parse({"--rdzv-backend", "etcd-v3", "--rdzv-endpoint", "e:2379", "t.py"}).rdzv.backend,
            rdzv::Backend::kEtcd);
  EXPECT_EQ(parse({"t.py"}, {{"PET_RDZV_BACKEND", "c10d"}}).rdzv.backend, rdzv::Backend::kC10d);
  EXPECT_THROW(parse({"--rdzv-backend", "zookeeper", "t.py"}), UsageError);
  EXPECT_THROW(parse({"--rdzv-backend", "etcd-v2", "--rdzv-endpoint", "e:2379", "t.py"}), UsageError);
}

}  // namespace
}  // namespace ctrun::agent

namespace ctrun::agent {
namespace {

// --hang-timeout: seconds, or auto[:FLOOR[:CEILING]] (agent/hang/auto_timeout.hpp), from the flag or PET_.
TEST(FlagValues, HangTimeoutSecondsOrAutoWithItsBounds) {
  EXPECT_EQ(parse({"--hang-timeout", "30", "t.py"}).hang.timeout, 30);
  EXPECT_FALSE(parse({"--hang-timeout", "30", "t.py"}).hang.timeout_auto);
  const LaunchConfig a = parse({"--hang-timeout", "auto", "t.py"});
  ASSERT_TRUE(a.hang.timeout_auto);
  EXPECT_EQ(a.hang.timeout, 0);
  EXPECT_EQ(a.hang.timeout_auto->floor_s, 120);
  EXPECT_EQ(a.hang.timeout_auto->ceiling_s, 1200);
  const LaunchConfig b = parse({"t.py"}, {{"PET_HANG_TIMEOUT", "auto:5:60"}});
  ASSERT_TRUE(b.hang.timeout_auto);
  EXPECT_EQ(b.hang.timeout_auto->floor_s, 5);
  EXPECT_EQ(b.hang.timeout_auto->ceiling_s, 60);
  for (const char* bad : {"auto:", "auto:10:5", "automatic", "auto:x"})
    EXPECT_THROW(parse({"--hang-timeout", bad, "t.py"}), UsageError) << bad;
}

// Failing nodes stepped out: K defaults to --max-restarts (unset here), the window and the cooldown take seconds or
// a unit, and a cooldown's MAX below its MIN is refused.
TEST(FlagValues, NodeFailuresWindowAndCooldown) {
  const LaunchConfig d = parse({"t.py"});
  EXPECT_FALSE(d.restarts.max_node_failures);
  EXPECT_EQ(d.restarts.node_failure_window_s, 3600);
  EXPECT_EQ(d.restarts.node_cooldown_min_s, 60);
  EXPECT_EQ(d.restarts.node_cooldown_max_s, 600);
  const LaunchConfig c =
      parse({"--max-node-failures", "0", "--node-failure-window", "90", "--node-cooldown", "30s:1h", "t.py"});
  EXPECT_EQ(c.restarts.max_node_failures, 0);
  EXPECT_EQ(c.restarts.node_failure_window_s, 90);
  EXPECT_EQ(c.restarts.node_cooldown_min_s, 30);
  EXPECT_EQ(c.restarts.node_cooldown_max_s, 3600);
  const LaunchConfig one = parse({"--node-cooldown", "2m", "t.py"});
  EXPECT_EQ(one.restarts.node_cooldown_min_s, 120);
  EXPECT_EQ(one.restarts.node_cooldown_max_s, 120);
  for (const char* bad : {"10:5", "1:2:3", "x", "0:10", ":5", "-1"})
    EXPECT_THROW(parse({"--node-cooldown", bad, "t.py"}), UsageError) << bad;
  EXPECT_THROW(parse({"--max-node-failures", "-1", "t.py"}), UsageError);
  EXPECT_THROW(parse({"--node-failure-window", "0", "t.py"}), UsageError);
}

}  // namespace
}  // namespace ctrun::agent
