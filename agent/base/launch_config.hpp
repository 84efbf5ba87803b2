#pragma once
// LaunchConfig: everything one `ctrun` invocation was asked to do, after flags, PET_* env, the config file
// and defaults were merged (agent/config/cli.cpp). Plain data, so tests and the agent loop can build it directly.
// Every flag's default comes from the flag table (agent/config/flags.cpp, which defines the constructor by
// applying each row's default), never from an initializer here: a default is written once.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "rendezvous/parameters.hpp"

namespace ctrun::auth {
class Secret;
}

namespace ctrun::agent {

// torchrun's Std: 0 none, 1 stdout, 2 stderr, 3 both. Either one value for every local rank or a map
// `0:1,1:2` (ranks missing from the map get 0), exactly as torchrun's -r/--redirects and -t/--tee.
struct StdSpec {
  int all = 0;
  std::map<int, int> per_rank;
  bool is_map = false;

  int for_rank(int local_rank) const;
  bool out(int local_rank) const { return (for_rank(local_rank) & 1) != 0; }
  bool err(int local_rank) const { return (for_rank(local_rank) & 2) != 0; }
};

enum class CpuBind { kNone, kCore, kNuma };

// torchrun's --numa-binding as far as ctrun implements it: `node` binds local rank r to the CPUs of one NUMA node
// (as --cpu-bind numa, since ctrun does not read which node each rank's GPU sits on).
enum class NumaBinding { kNone, kNode };

// LaunchConfig is grouped into rooms, one per part of the agent that reads them (each flag's row in
// agent/config/flags.cpp names the room's field it fills). Inside a room a field drops the room's prefix:
// --rdzv-endpoint is rdzv.endpoint, --checkpoint-dir checkpoint.dir, --health-check health.command.

// The rendezvous that forms the job, and the store its workers meet at (agent/launch/, agent/round/).
struct RendezvousConfig {
  int min_nodes{};  // --nnodes MIN[:MAX]
  int max_nodes{};
  rdzv::Backend backend{};
  std::string endpoint;
  std::string id;  // torchrun's default is the string "none"
  std::map<std::string, std::string> conf;
  bool standalone{};
  int node_rank{};
  std::string master_addr;
  std::optional<int> master_port;  // unset: the agent's worker store picks an ephemeral port
  std::optional<std::string> local_addr;
  // --store-relay: with several nodes, this node's workers reach the job's store through a relay in this agent
  // (agent/launch/store_relay.hpp); off: each worker connects to MASTER_ADDR:MASTER_PORT itself.
  bool store_relay{};
};

// The local workers: how many, how each is started and bound (agent/launch/, agent/process/, agent/preload/).
struct WorkerConfig {
  std::string nproc_per_node_spec;  // as given: int, cpu, gpu, auto
  int nproc_per_node{};             // resolved
  std::string role;
  bool module{};
  bool no_python{};
  bool run_path{};
  bool virtual_local_rank{};
  NumaBinding numa_binding{};
  CpuBind cpu_bind{};
  std::string start_method;
  std::vector<std::string> preload;  // --preload: modules a warm process imports once (agent/preload/)
  // A worker that crashes in native teardown after its program ended with 0 counts as failed, as torchrun counts it
  // (off: it counts as exit 0, agent/teardown/).
  bool fail_on_teardown_crash{};
};

// Restarts and the policies that decide them (agent/round/, agent/policy/).
struct RestartConfig {
  int max_restarts{};
  int stop_without_progress{};  // 0: off; else restarts in a row without a newer checkpoint step
  // Failing nodes stepped out (elastic rendezvous): after this many failures that started on this node within the
  // window, it leaves the job for a cooldown that doubles with each step-out. Unset: --max-restarts; 0: never.
  std::optional<int> max_node_failures;
  double node_failure_window_s{};
  double node_cooldown_min_s{};
  double node_cooldown_max_s{};
  double monitor_interval{};      // seconds between membership checks of a multi-node round
  int initial_restart_count = 0;  // TORCHELASTIC_RESTART_COUNT of the first attempt (Slurm: SLURM_RESTART_COUNT)
};

// The node's health before each round (agent/health/).
struct HealthConfig {
  std::optional<std::string> command;  // --health-check: a shell command run before joining each round
  double timeout{};                    // --health-check-timeout, seconds
  // Built-in health checks before each round (agent/health/node_checks.hpp): free space wanted, and a way out.
  std::uint64_t min_free{};
  bool no_builtin_checks{};
};

// Worker output and the agent's own records (agent/logs/).
struct LogConfig {
  std::optional<std::string> dir;  // --log-dir
  // --log-line-prefix-template (torchrun after 2.6); unset: TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE, as torchrun.
  std::optional<std::string> line_prefix_template;
  StdSpec redirects;
  StdSpec tee;
  std::vector<int> local_ranks_filter;  // empty: every rank reaches the console
  std::vector<std::string> duplicate_stdout_filters;
  std::vector<std::string> duplicate_stderr_filters;
  std::optional<std::string> specs;      // --logs-specs, accepted for compatibility
  std::optional<std::string> event_log;  // --event-log: one JSON line per event
  std::string event_log_handler;         // accepted for compatibility
};

// Signals and the end of the job (agent/process/, agent/exit_sequence.*, agent/round/round_end.*).
struct ShutdownConfig {
  std::string signals_to_handle;
  std::vector<int> signal_numbers;  // parsed signals_to_handle
  // Forwarded to every worker's process group (and recorded in the event log), not a reason to stop: SIGUSR1/2
  // unless --signals-to-handle names them (then they stop the job like SIGTERM).
  std::vector<int> forwarded_signal_numbers;
  double timeout{};               // --shutdown-timeout: seconds between the forwarded signal and SIGKILL
  double exit_barrier_timeout{};  // seconds a node that succeeded waits for the others (torchrun: 300)
};

// Hangs and stragglers (agent/hang/, docs/hang.md).
struct HangConfig {
  double timeout{};  // --hang-timeout: 0 = hangs are reported, never a failure
  // --hang-timeout auto[:FLOOR[:CEILING]]: learned from the job (agent/hang/auto_timeout.hpp); timeout is 0.
  struct Auto {
    double floor_s = 0;
    double ceiling_s = 0;
  };
  std::optional<Auto> timeout_auto;
  double report_after{};        // --hang-report-after
  double straggler_interval{};  // --straggler-interval: the straggler window, seconds (tests shorten it)
};

// In-memory checkpoints (agent/checkpoint/, docs/checkpoint.md).
struct CheckpointConfig {
  // --checkpoint-memory in bytes: nullopt = the default rule (memory_limit.hpp); 0 = off.
  std::optional<std::uint64_t> memory;
  // --checkpoint-dir: committed steps copied there in the background ("" = none), every N steps at most, or (when
  // --checkpoint-dir-every is a duration) every so many seconds at most: then dir_every is 0.
  std::string dir;
  int dir_every{};
  double dir_every_s{};
  // --checkpoint-replicas: nodes each node's newest step is copied to (nullopt: 1 with several nodes).
  std::optional<int> replicas;
};

// --hostfile/--hosts: one agent per host over ssh (agent/multihost/, docs/cli.md "Clusters").
struct MultiHostConfig {
  std::optional<std::string> hostfile;
  std::optional<std::string> hosts;
  std::optional<std::string> include;
  std::optional<std::string> exclude;
  std::string ssh;
  std::string exports;
  bool exit_on_stdin_close{};  // what --hostfile runs on each host
  bool enabled() const { return hostfile.has_value() || hosts.has_value(); }
};

struct LaunchConfig {
  LaunchConfig();  // the flag table's defaults

  RendezvousConfig rdzv;
  WorkerConfig workers;
  RestartConfig restarts;
  HealthConfig health;
  LogConfig logs;
  ShutdownConfig shutdown;
  HangConfig hang;
  CheckpointConfig checkpoint;
  MultiHostConfig multihost;

  bool dry_run{};                   // print what would run, start nothing
  bool propagate_exit_code{};       // exit with the root cause's code instead of torchrun's 1
  std::optional<int> metrics_port;  // --metrics-port: Prometheus metrics (agent/metrics/); 0: a free port
  std::string cluster_summary;      // what was derived from Slurm/MPI/Kubeflow variables, or empty

  // The job's secret (docs/security.md, agent/config/job_secret.hpp): --secret-file ("-": the first line of stdin),
  // else --rdzv-conf secret_file=, else $CTRUN_SECRET; resolved into `secret` at start (null: none).
  std::string secret_file;
  std::shared_ptr<const auth::Secret> secret;

  // The worker command.
  std::string script;
  std::vector<std::string> script_args;
};

}  // namespace ctrun::agent
