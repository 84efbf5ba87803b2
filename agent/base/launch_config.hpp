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

struct LaunchConfig {
  LaunchConfig();  // the flag table's defaults

  // Nodes and workers.
  int min_nodes{};
  int max_nodes{};
  std::string nproc_per_node_spec;  // as given: int, cpu, gpu, auto
  int nproc_per_node{};             // resolved

  // Rendezvous.
  rdzv::Backend rdzv_backend{};
  std::string rdzv_endpoint;
  std::string rdzv_id;  // torchrun's default is the string "none"
  std::map<std::string, std::string> rdzv_conf;
  bool standalone{};
  int node_rank{};
  std::string master_addr;
  std::optional<int> master_port;  // unset: the agent's worker store picks an ephemeral port
  std::optional<std::string> local_addr;

  // Restarts and monitoring.
  int max_restarts{};
  int stop_without_progress{};              // 0: off; else restarts in a row without a newer checkpoint step
  // Failing nodes stepped out (elastic rendezvous): after this many failures that started on this node within the
  // window, it leaves the job for a cooldown that doubles with each step-out. Unset: --max-restarts; 0: never.
  std::optional<int> max_node_failures;
  double node_failure_window_s{};
  double node_cooldown_min_s{};
  double node_cooldown_max_s{};
  std::optional<std::string> health_check;  // a shell command run before joining each round
  double health_check_timeout{};            // seconds
  double monitor_interval{};                // seconds between membership checks of a multi-node round
  std::string start_method;
  std::string event_log_handler;

  // Workers.
  std::string role;
  bool module{};
  bool no_python{};
  bool run_path{};
  bool virtual_local_rank{};
  NumaBinding numa_binding{};
  CpuBind cpu_bind{};

  // Logs.
  std::optional<std::string> log_dir;
  // --log-line-prefix-template (torchrun after 2.6); unset: TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE, as torchrun.
  std::optional<std::string> log_line_prefix_template;
  StdSpec redirects;
  StdSpec tee;
  std::vector<int> local_ranks_filter;  // empty: every rank reaches the console
  std::vector<std::string> duplicate_stdout_filters;
  std::vector<std::string> duplicate_stderr_filters;
  std::optional<std::string> logs_specs;

  // Signals.
  std::string signals_to_handle;
  std::vector<int> signal_numbers;  // parsed signals_to_handle
  double shutdown_timeout{};        // seconds between the forwarded signal and SIGKILL
  // Forwarded to every worker's process group (and recorded in the event log), not a reason to stop: SIGUSR1/2
  // unless --signals-to-handle names them (then they stop the job like SIGTERM).
  std::vector<int> forwarded_signal_numbers;
  double exit_barrier_timeout{};  // seconds a node that succeeded waits for the others (torchrun: 300)
  double hang_timeout{};          // --hang-timeout: 0 = hangs are reported, never a failure (docs/hang.md)
  // --hang-timeout auto[:FLOOR[:CEILING]]: learned from the job (agent/hang/auto_timeout.hpp); hang_timeout is 0.
  struct HangAuto {
    double floor_s = 0;
    double ceiling_s = 0;
  };
  std::optional<HangAuto> hang_timeout_auto;
  double hang_report_after{};     // --hang-report-after
  double straggler_interval{};    // --straggler-interval: the straggler window, seconds (tests shorten it)
  bool dry_run{};                 // print what would run, start nothing

  // Beyond torchrun.
  std::optional<std::string> event_log;  // one JSON line per event
  bool propagate_exit_code{};            // exit with the root cause's code instead of torchrun's 1
  // A worker that crashes in native teardown after its program ended with 0 counts as failed, as torchrun counts it
  // (off: it counts as exit 0, agent/teardown/).
  bool fail_on_teardown_crash{};
  std::vector<std::string> preload;  // --preload: modules a warm process imports once (agent/preload/)
  std::optional<int> metrics_port;   // --metrics-port: Prometheus metrics (agent/metrics/); 0: a free port
  // --store-relay: with several nodes, this node's workers reach the job's store through a relay in this agent
  // (agent/launch/store_relay.hpp); off: each worker connects to MASTER_ADDR:MASTER_PORT itself.
  bool store_relay{};
  // --checkpoint-memory in bytes (agent/checkpoint/): nullopt = the default rule (memory_limit.hpp); 0 = off.
  std::optional<std::uint64_t> checkpoint_memory;
  // --checkpoint-dir: committed steps copied there in the background ("" = none), every N steps at most, or (when
  // --checkpoint-dir-every is a duration) every so many seconds at most: then checkpoint_dir_every is 0.
  std::string checkpoint_dir;
  int checkpoint_dir_every{};
  double checkpoint_dir_every_s{};
  // --checkpoint-replicas: nodes each node's newest step is copied to (nullopt: 1 with several nodes).
  std::optional<int> checkpoint_replicas;
  // Built-in health checks before each round (agent/health/node_checks.hpp): free space wanted, and a way out.
  std::uint64_t health_min_free{};
  bool no_builtin_health_checks{};

  // Clusters (docs/cli.md "Clusters").
  int initial_restart_count = 0;  // TORCHELASTIC_RESTART_COUNT of the first attempt (Slurm: SLURM_RESTART_COUNT)
  std::string cluster_summary;    // the line saying what was derived from Slurm/MPI/Kubeflow variables, or empty
  struct MultiHost {
    std::optional<std::string> hostfile;
    std::optional<std::string> hosts;
    std::optional<std::string> include;
    std::optional<std::string> exclude;
    std::string ssh;
    std::string exports;
    bool enabled() const { return hostfile.has_value() || hosts.has_value(); }
  } multihost;
  bool exit_on_stdin_close{};

  // The job's secret (docs/security.md, agent/config/job_secret.hpp): --secret-file ("-": the first line of stdin),
  // else --rdzv-conf secret_file=, else $CTRUN_SECRET; resolved into `secret` at start (null: none).
  std::string secret_file;
  std::shared_ptr<const auth::Secret> secret;

  // The worker command.
  std::string script;
  std::vector<std::string> script_args;
};

}  // namespace ctrun::agent
