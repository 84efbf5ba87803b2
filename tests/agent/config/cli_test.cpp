// Flag parsing: both spellings, PET_* env, config file precedence, errors, and every torchrun flag.
#include <gtest/gtest.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>

#include <fstream>

#include "agent/config/cli.hpp"
#include "agent/config/config_file.hpp"
#include "agent/config/flags.hpp"
#include "agent/config/launch_config_builder.hpp"
#include "tests/agent/env_of.hpp"

namespace ctrun::agent {
namespace {

using test::env_of;

LaunchConfig parse(std::vector<std::string> args, std::map<std::string, std::string> env = {}) {
  return parse_command_line(args, env_of(std::move(env)));
}

TEST(Cli, DashedAndUnderscoredSpellings) {
  for (const char* flag : {"--nproc-per-node", "--nproc_per_node"}) {
    auto c = parse({flag, "4", "train.py"});
    EXPECT_EQ(c.workers.nproc_per_node, 4) << flag;
  }
  auto c = parse({"--nproc_per_node=3", "--max-restarts=2", "--rdzv_id", "job", "train.py"});
  EXPECT_EQ(c.workers.nproc_per_node, 3);
  EXPECT_EQ(c.restarts.max_restarts, 2);
  EXPECT_EQ(c.rdzv.id, "job");
}

TEST(Cli, Defaults) {
  auto c = parse({"train.py"});
  EXPECT_EQ(c.workers.nproc_per_node, 1);
  EXPECT_EQ(c.rdzv.id, "none");
  EXPECT_EQ(c.rdzv.backend, rdzv::Backend::kStatic);
  EXPECT_EQ(c.workers.role, "default");
  EXPECT_EQ(c.restarts.max_restarts, 0);
  EXPECT_DOUBLE_EQ(c.shutdown.timeout, 30.0);
  EXPECT_EQ(c.shutdown.signals_to_handle, "SIGTERM,SIGINT,SIGHUP,SIGQUIT");
  EXPECT_EQ(c.shutdown.signal_numbers, (std::vector<int>{SIGTERM, SIGINT, SIGHUP, SIGQUIT}));
  EXPECT_EQ(c.rdzv.master_addr, "127.0.0.1");
  EXPECT_FALSE(c.rdzv.master_port.has_value());
}

TEST(Cli, ScriptArgumentsAreUntouched) {
  auto c = parse({"--nproc-per-node", "2", "train.py", "--nproc-per-node", "9", "-m", "--", "x"});
  EXPECT_EQ(c.workers.nproc_per_node, 2);
  EXPECT_EQ(c.script, "train.py");
  EXPECT_EQ(c.script_args, (std::vector<std::string>{"--nproc-per-node", "9", "-m", "--", "x"}));
  auto d = parse({"--standalone", "--", "train.py", "--lr", "1"});
  EXPECT_EQ(d.script, "train.py");
  EXPECT_EQ(d.script_args, (std::vector<std::string>{"--lr", "1"}));
}

TEST(Cli, PetEnvironmentDefaultsAndCliWins) {
  auto c = parse({"train.py"}, {{"PET_NPROC_PER_NODE", "5"}, {"PET_MAX_RESTARTS", "3"}, {"PET_STANDALONE", "1"}});
  EXPECT_EQ(c.workers.nproc_per_node, 5);
  EXPECT_EQ(c.restarts.max_restarts, 3);
  EXPECT_TRUE(c.rdzv.standalone);
  auto d = parse({"--nproc-per-node=2", "train.py"}, {{"PET_NPROC_PER_NODE", "5"}});
  EXPECT_EQ(d.workers.nproc_per_node, 2);
  auto r = parse({"train.py"}, {{"PET_REDIRECTS", "3"}, {"PET_TEE", "0:1,1:2"}});
  EXPECT_EQ(r.logs.redirects.all, 3);
  EXPECT_TRUE(r.logs.tee.out(0));
  EXPECT_TRUE(r.logs.tee.err(1));
  EXPECT_FALSE(r.logs.tee.out(2));
}

TEST(Cli, BooleanPetMustBeAnInteger) {
  EXPECT_THROW(parse({"train.py"}, {{"PET_STANDALONE", "yes"}}), UsageError);
  EXPECT_FALSE(parse({"train.py"}, {{"PET_NO_PYTHON", "0"}}).workers.no_python);
}

TEST(Cli, ShutdownTimeoutFromTorchEnv) {
  EXPECT_DOUBLE_EQ(parse({"t.py"}, {{"TORCH_ELASTIC_SHUTDOWN_TIMEOUT", "7"}}).shutdown.timeout, 7.0);
  EXPECT_DOUBLE_EQ(parse({"--shutdown-timeout", "2.5", "t.py"}).shutdown.timeout, 2.5);
  EXPECT_THROW(parse({"--shutdown-timeout", "-1", "t.py"}), UsageError);
}

// The hang stack's straggler window comes in here, once, with the flags: the hang stack reads no environment.
TEST(Cli, StragglerIntervalFromItsVariableOrAUsageError) {
  EXPECT_DOUBLE_EQ(parse({"t.py"}).hang.straggler_interval, 300.0);
  EXPECT_DOUBLE_EQ(parse({"t.py"}, {{"CTRUN_STRAGGLER_INTERVAL", "2"}}).hang.straggler_interval, 2.0);
  for (const char* bad : {"", "0", "-1", "2s", "x"}) {
    EXPECT_THROW(parse({"t.py"}, {{"CTRUN_STRAGGLER_INTERVAL", bad}}), UsageError) << "'" << bad << "'";
  }
}

TEST(Cli, UnambiguousLongPrefixesAsArgparse) {
  auto c = parse({"--nproc=2", "--max-r", "4", "--stand", "t.py", "--nproc=9"});
  EXPECT_EQ(c.workers.nproc_per_node_spec, "2");
  EXPECT_EQ(c.restarts.max_restarts, 4);
  EXPECT_TRUE(c.rdzv.standalone);
  EXPECT_EQ(c.script_args, (std::vector<std::string>{"--nproc=9"}));  // the script's words are never touched
  EXPECT_EQ(parse({"--max_rest=1", "t.py"}).restarts.max_restarts, 1);
  try {
    parse({"--n=2", "t.py"});
    FAIL() << "--n is ambiguous";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("ambiguous option: --n could match --nnodes, --nproc-per-node"),
              std::string::npos)
        << e.what();
  }
}

TEST(Cli, EmptyValuesAndEmptyPortsAreErrors) {
  EXPECT_THROW(parse({"--log-dir=", "t.py"}), UsageError);
  EXPECT_THROW(parse({"--rdzv-id=", "t.py"}), UsageError);
  EXPECT_THROW(parse({"--rdzv-backend=c10d", "--rdzv-endpoint=localhost:", "--nnodes=2", "t.py"}), UsageError);
  // the word after an empty `--flag=` is never taken as its value
  try {
    parse({"--log-dir=", "/tmp/x", "t.py"});
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--log-dir"), std::string::npos) << e.what();
  }
}

TEST(Cli, ExitBarrierTimeoutFlagEnvAndDefault) {
  EXPECT_DOUBLE_EQ(parse({"t.py"}).shutdown.exit_barrier_timeout, 300.0);  // torchrun's fixed value
  EXPECT_DOUBLE_EQ(parse({"t.py"}, {{"TORCH_ELASTIC_EXIT_BARRIER_TIMEOUT", "12"}}).shutdown.exit_barrier_timeout, 12.0);
  EXPECT_DOUBLE_EQ(parse({"--exit-barrier-timeout", "0.5", "t.py"}).shutdown.exit_barrier_timeout, 0.5);
  EXPECT_DOUBLE_EQ(parse({"t.py"}, {{"PET_EXIT_BARRIER_TIMEOUT", "9"}}).shutdown.exit_barrier_timeout, 9.0);
  EXPECT_THROW(parse({"--exit-barrier-timeout", "-1", "t.py"}), UsageError);
  EXPECT_THROW(parse({"--exit-barrier-timeout", "soon", "t.py"}), UsageError);
}

TEST(Cli, CheckpointMemoryTakesSizes) {
  EXPECT_FALSE(parse({"t.py"}).checkpoint.memory);  // the default rule, applied by the agent
  EXPECT_EQ(parse({"--checkpoint-memory", "8G", "t.py"}).checkpoint.memory, std::uint64_t{8} << 30);
  EXPECT_EQ(parse({"--checkpoint-memory=1.5KiB", "t.py"}).checkpoint.memory, 1536u);
  EXPECT_EQ(parse({"--checkpoint-memory", "4096", "t.py"}).checkpoint.memory, 4096u);
  EXPECT_EQ(parse({"--checkpoint-memory", "0", "t.py"}).checkpoint.memory, 0u);
  EXPECT_FALSE(parse({"t.py"}).checkpoint.replicas);  // 1 with several nodes, decided per round
  EXPECT_EQ(parse({"--checkpoint-replicas", "2", "t.py"}).checkpoint.replicas, 2);
  EXPECT_THROW(parse({"--checkpoint-replicas", "-1", "t.py"}), UsageError);
  EXPECT_EQ(parse({"t.py"}, {{"PET_CHECKPOINT_MEMORY", "512M"}}).checkpoint.memory, std::uint64_t{512} << 20);
  EXPECT_THROW(parse({"--checkpoint-memory", "lots", "t.py"}), UsageError);
  EXPECT_THROW(parse({"--checkpoint-memory", "-1G", "t.py"}), UsageError);
  EXPECT_THROW(parse({"--checkpoint-memory", "8X", "t.py"}), UsageError);
}

TEST(Cli, CheckpointDirMustBeAWritableDirectory) {
  EXPECT_EQ(parse({"t.py"}).checkpoint.dir, "");
  EXPECT_EQ(parse({"t.py"}).checkpoint.dir_every, 10);
  const std::string dir = ::testing::TempDir() + "ctrun-cli-ckdir-" + std::to_string(::getpid()) + "/a/b";
  EXPECT_EQ(parse({"--checkpoint-dir", dir, "--checkpoint-dir-every", "3", "t.py"}).checkpoint.dir, dir);
  EXPECT_TRUE(std::filesystem::is_directory(dir));  // made, with its parents
  EXPECT_EQ(parse({"--checkpoint-dir-every", "3", "t.py"}).checkpoint.dir_every, 3);
  std::filesystem::remove_all(::testing::TempDir() + "ctrun-cli-ckdir-" + std::to_string(::getpid()));
  EXPECT_THROW(parse({"--checkpoint-dir", "/proc/ctrun-no-such", "t.py"}), UsageError);
  EXPECT_THROW(parse({"--checkpoint-dir", "/proc/self/status", "t.py"}), UsageError);
  EXPECT_THROW(parse({"--checkpoint-dir-every", "0", "t.py"}), UsageError);
  // Or a duration: then no step count.
  const LaunchConfig by_time = parse({"--checkpoint-dir-every", "5m", "t.py"});
  EXPECT_EQ(by_time.checkpoint.dir_every, 0);
  EXPECT_DOUBLE_EQ(by_time.checkpoint.dir_every_s, 300.0);
  EXPECT_DOUBLE_EQ(parse({"--checkpoint-dir-every", "1.5h", "t.py"}).checkpoint.dir_every_s, 5400.0);
  EXPECT_DOUBLE_EQ(parse({"t.py"}, {{"PET_CHECKPOINT_DIR_EVERY", "30s"}}).checkpoint.dir_every_s, 30.0);
  for (const char* bad : {"0s", "-5m", "s", "5x", "five", "1e12h"}) {
    EXPECT_THROW(parse({"--checkpoint-dir-every", bad, "t.py"}), UsageError) << bad;
  }
}

TEST(Cli, Sigusr1And2AreForwardedUnlessTheyAreDeathSignals) {
  EXPECT_EQ(parse({"t.py"}).shutdown.forwarded_signal_numbers, (std::vector<int>{SIGUSR1, SIGUSR2}));
  EXPECT_EQ(parse({"--signals-to-handle", "SIGTERM,SIGUSR1", "t.py"}).shutdown.forwarded_signal_numbers,
            (std::vector<int>{SIGUSR2}));
}

TEST(Cli, StandaloneOverridesRendezvous) {
  auto c = parse({"--standalone", "--rdzv-id", "x", "--master-port", "1234", "t.py"});
  EXPECT_EQ(c.rdzv.backend, rdzv::Backend::kC10d);
  EXPECT_NE(c.rdzv.id, "x");
  EXPECT_EQ(c.rdzv.id.size(), 36u);
  EXPECT_FALSE(c.rdzv.master_port.has_value());
}

TEST(Cli, Errors) {
  EXPECT_THROW(parse({"--bogus", "t.py"}), UsageError);
  EXPECT_THROW(parse({}), UsageError);
  EXPECT_THROW(parse({"--nproc-per-node", "zero", "t.py"}), UsageError);
  EXPECT_THROW(parse({"--nproc-per-node", "0", "t.py"}), UsageError);
  EXPECT_THROW(parse({"--no-python", "-m", "t.py"}), UsageError);
  EXPECT_THROW(parse({"--start-method", "thread", "t.py"}), UsageError);
  EXPECT_THROW(parse({"--redirects", "4", "t.py"}), UsageError);
  EXPECT_THROW(parse({"--tee", "10:1", "t.py"}), UsageError);
  EXPECT_THROW(parse({"--rdzv-conf", "a=1,b", "t.py"}), UsageError);
  EXPECT_THROW(parse({"--signals-to-handle", "SIGNOPE", "t.py"}), UsageError);
  EXPECT_THROW(parse({"--monitor-interval", "0", "t.py"}), UsageError);
  EXPECT_THROW(parse({"--nnodes", "1:2:3", "t.py"}), UsageError);
  EXPECT_THROW(parse({"--nnodes", "2:1", "t.py"}), UsageError);
  EXPECT_THROW(parse({"--cpu-bind", "socket", "t.py"}), UsageError);
  EXPECT_THROW(lex_command_line({"--help"}), HelpRequested);
}

TEST(Cli, MultiNodeFlags) {
  auto st =
      parse({"--nnodes", "2", "--node-rank", "1", "--master-addr", "127.0.0.2", "--master-port", "29999", "t.py"});
  EXPECT_EQ(st.rdzv.max_nodes, 2);
  EXPECT_EQ(st.rdzv.node_rank, 1);
  auto dyn = parse({"--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.2:29400", "--nnodes", "1:4", "--rdzv-conf",
                    "join_timeout=5,keep_alive_interval=0.5", "t.py"});
  EXPECT_EQ(dyn.rdzv.min_nodes, 1);
  EXPECT_EQ(dyn.rdzv.max_nodes, 4);
  // Bad multi-node input is a usage error (exit 2) with the reason.
  for (auto args : std::vector<std::vector<std::string>>{
           {"--nnodes", "2", "--node-rank", "2", "t.py"},
           {"--nnodes", "1:4", "t.py"},                            // static needs a fixed N
           {"--rdzv-backend", "c10d", "--nnodes", "1:4", "t.py"},  // no endpoint
           {"--rdzv-backend", "c10d", "--rdzv-endpoint", "h:1", "--nnodes", "2", "--rdzv-conf", "join_timeout=x",
            "t.py"},
           {"--rdzv-backend", "etcd", "t.py"},  // no endpoint
           {"--rdzv-backend", "etcd", "--rdzv-endpoint", "h:1,", "t.py"},
           {"--rdzv-backend", "etcd", "--rdzv-endpoint", "h:1", "--rdzv-conf", "protocol=ftp", "t.py"},
           {"--rdzv-backend", "etcd", "--rdzv-endpoint", "h:1", "--rdzv-conf", "cacert=/ca.pem",
            "t.py"}}) {  // TLS files need https
    EXPECT_THROW(parse(args), UsageError) << args[0] << " " << args[1];
  }
  // etcd v3 (alias etcd-v3): a list of endpoints; etcd-v2 is refused with the reason.
  auto etcd = parse({"--rdzv-backend", "etcd-v3", "--rdzv-endpoint", "127.0.0.1:2379,https://127.0.0.2:2379",
                     "--nnodes", "2:3", "--rdzv-conf", "cacert=/ca.pem,lease_ttl=30", "t.py"});
  EXPECT_EQ(etcd.rdzv.backend, rdzv::Backend::kEtcd);
  try {
    parse({"--rdzv-backend", "etcd-v2", "--rdzv-endpoint", "h:2379", "t.py"});
    ADD_FAILURE() << "etcd-v2 was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("removed in etcd 3.6"), std::string::npos) << e.what();
  }
}

TEST(Cli, RdzvConfAndFilters) {
  auto c = parse({"--rdzv-conf", "join_timeout=5,read_timeout=60", "--local-ranks-filter", "0,2",
                  "--duplicate-stdout-filters", "loss,,acc,err", "t.py"});
  EXPECT_EQ(c.rdzv.conf.at("join_timeout"), "5");
  EXPECT_EQ(c.rdzv.conf.at("read_timeout"), "60");
  EXPECT_EQ(c.logs.local_ranks_filter, (std::vector<int>{0, 2}));
  EXPECT_EQ(c.logs.duplicate_stdout_filters, (std::vector<std::string>{"loss,acc", "err"}));
}

TEST(Cli, ShortOptions) {
  auto c = parse({"-r", "3", "-t", "0:1", "-m", "pkg.train"});
  EXPECT_EQ(c.logs.redirects.all, 3);
  EXPECT_TRUE(c.logs.tee.out(0));
  EXPECT_TRUE(c.workers.module);
  EXPECT_EQ(c.script, "pkg.train");
}

// Every flag of torchrun's reference list (§1.2) parses in both spellings with a valid value.
TEST(Cli, PreloadTakesModuleNames) {
  EXPECT_TRUE(parse({"train.py"}).workers.preload.empty());
  EXPECT_EQ(parse({"--preload", "torch,numpy.linalg", "train.py"}).workers.preload,
            (std::vector<std::string>{"torch", "numpy.linalg"}));
  EXPECT_EQ(parse({"train.py"}, {{"PET_PRELOAD", "torch"}}).workers.preload, std::vector<std::string>{"torch"});
  for (const char* bad : {"torch;rm", "1torch", ".torch", "torch.", "to rch"})
    EXPECT_THROW(parse({"--preload", bad, "train.py"}), UsageError) << bad;
}

TEST(Cli, StoreRelayOnByDefaultOffByFlagOrPet) {
  EXPECT_TRUE(parse({"t.py"}).rdzv.store_relay);
  EXPECT_FALSE(parse({"--store-relay", "off", "t.py"}).rdzv.store_relay);
  EXPECT_TRUE(parse({"--store-relay=on", "t.py"}).rdzv.store_relay);
  EXPECT_FALSE(parse({"--store_relay", "0", "t.py"}).rdzv.store_relay);
  EXPECT_FALSE(parse({"t.py"}, {{"PET_STORE_RELAY", "off"}}).rdzv.store_relay);
  EXPECT_TRUE(parse({"--store-relay", "true", "t.py"}, {{"PET_STORE_RELAY", "off"}}).rdzv.store_relay);
  try {
    parse({"--store-relay", "maybe", "t.py"});
    ADD_FAILURE() << "no usage error";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("on or off"), std::string::npos) << e.what();
  }
}

TEST(Cli, EveryTorchrunFlagParses) {
  const std::map<std::string, std::string> sample = {{"nnodes", "1:1"},
                                                     {"nproc_per_node", "2"},
                                                     {"rdzv_backend", "c10d"},
                                                     {"rdzv_endpoint", "localhost:29400"},
                                                     {"rdzv_id", "job"},
                                                     {"rdzv_conf", "join_timeout=5"},
                                                     {"max_restarts", "1"},
                                                     {"monitor_interval", "5"},
                                                     {"start_method", "fork"},
                                                     {"event_log_handler", "console"},
                                                     {"role", "trainer"},
                                                     {"log_dir", "/tmp/x"},
                                                     {"redirects", "3"},
                                                     {"tee", "0:1"},
                                                     {"local_ranks_filter", "0"},
                                                     {"log_line_prefix_template", "[${rank}] "},
                                                     {"duplicate_stdout_filters", "a"},
                                                     {"duplicate_stderr_filters", "b"},
                                                     {"node_rank", "0"},
                                                     {"master_addr", "127.0.0.1"},
                                                     {"master_port", "29501"},
                                                     {"local_addr", "127.0.0.1"},
                                                     {"logs_specs", "default"},
                                                     {"numa_binding", "node"},
                                                     {"signals_to_handle", "SIGTERM,SIGUSR1"},
                                                     {"shutdown_timeout", "5"},
                                                     {"event_log", "/tmp/ev.jsonl"},
                                                     {"cpu_bind", "core"},
                                                     {"preload", "torch"},
                                                     {"hostfile", "/tmp/hostfile"},
                                                     {"hosts", "a,b"},
                                                     {"include", "a"},
                                                     {"exclude", "b"},
                                                     {"ssh", "ssh -p 2222"},
                                                     {"export", "A=1"},
                                                     {"exit_barrier_timeout", "7"},
                                                     {"hang_timeout", "60"},
                                                     {"hang_report_after", "120"},
                                                     {"straggler_interval", "60"},
                                                     {"metrics_port", "0"},
                                                     {"secret_file", "/etc/job.key"},
                                                     {"store_relay", "off"},
                                                     {"checkpoint_memory", "512M"},
                                                     {"checkpoint_dir", "/tmp"},
                                                     {"checkpoint_dir_every", "5"},
                                                     {"checkpoint_replicas", "1"},
                                                     {"stop_without_progress", "3"},
                                                     {"max_node_failures", "2"},
                                                     {"node_failure_window", "30m"},
                                                     {"node_cooldown", "1m:10m"},
                                                     {"health_check", "true"},
                                                     {"health_check_timeout", "5"},
                                                     {"health_min_free", "1G"},
                                                     {"dry_run", ""},
                                                     {"config", ""}};
  const std::vector<std::string> torchrun_flags = {"nnodes",
                                                   "nproc_per_node",
                                                   "rdzv_backend",
                                                   "rdzv_endpoint",
                                                   "rdzv_id",
                                                   "rdzv_conf",
                                                   "standalone",
                                                   "max_restarts",
                                                   "monitor_interval",
                                                   "start_method",
                                                   "event_log_handler",
                                                   "role",
                                                   "module",
                                                   "no_python",
                                                   "run_path",
                                                   "log_dir",
                                                   "redirects",
                                                   "tee",
                                                   "local_ranks_filter",
                                                   "duplicate_stdout_filters",
                                                   "duplicate_stderr_filters",
                                                   "node_rank",
                                                   "master_addr",
                                                   "master_port",
                                                   "local_addr",
                                                   "logs_specs",
                                                   "numa_binding",
                                                   "signals_to_handle",
                                                   "shutdown_timeout",
                                                   "virtual_local_rank"};
  // Flags that a rule between flags (flag_rules.cpp) allows only beside another.
  const std::map<std::string, std::vector<std::string>> partner = {{"include", {"--hosts", "a,b"}},
                                                                   {"exclude", {"--hosts", "a,b"}}};
  for (const auto& dest : torchrun_flags) ASSERT_NE(find_flag(dest), nullptr) << dest;
  for (const auto& f : flag_table()) {
    if (f.dest == "config") continue;
    for (const auto& name : {dashed_name(f.dest), underscored_name(f.dest)}) {
      std::vector<std::string> args = {name};
      if (f.kind != FlagKind::kBool) args.push_back(sample.at(std::string(f.dest)));
      if (auto it = partner.find(std::string(f.dest)); it != partner.end()) {
        args.insert(args.end(), it->second.begin(), it->second.end());
      }
      args.push_back("t.py");
      EXPECT_NO_THROW(parse(args)) << name;
      EXPECT_EQ(lex_command_line(args).values.count(std::string(f.dest)), 1u) << name;
    }
  }
}

TEST(ConfigFile, KeysAndPrecedence) {
  std::string path = ::testing::TempDir() + "/ctrun_cfg_" + std::to_string(::getpid()) + ".json";
  std::ofstream(path) << R"({"nproc-per-node": 3, "max_restarts": 2, "standalone": true, "role": "w"})";
  auto c = parse({"--config", path, "--max-restarts", "5", "t.py"}, {{"PET_ROLE", "env"}, {"PET_MAX_RESTARTS", "9"}});
  EXPECT_EQ(c.workers.nproc_per_node, 3);  // file
  EXPECT_EQ(c.restarts.max_restarts, 5);   // CLI beats file
  EXPECT_TRUE(c.rdzv.standalone);          // file boolean
  EXPECT_EQ(c.workers.role, "w");          // file beats PET_
  auto d = parse({"t.py"}, {{"PET_CONFIG", path}});
  EXPECT_EQ(d.workers.nproc_per_node, 3);
  EXPECT_THROW(parse_config_json(R"({"nproc": 2})", "x"), UsageError);
  EXPECT_THROW(parse_config_json("[1]", "x"), UsageError);
  EXPECT_THROW(parse_config_json("{", "x"), UsageError);
  EXPECT_THROW(parse({"--config", "/nonexistent/c.json", "t.py"}), UsageError);
}

TEST(ConfigFile, ShippedExamplesParse) {
  for (const char* name : {"single_node.json", "restarts_and_logs.json"}) {
    std::string path = std::string(CTRUN_SOURCE_DIR) + "/configs/" + name;
    EXPECT_NO_THROW(read_config_file(path)) << path;
  }
}

}  // namespace
}  // namespace ctrun::agent
