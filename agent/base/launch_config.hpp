#pragma once
// LaunchConfig: everything one `ctrun` invocation was asked to do, after flags, PET_* env, the config file
// and defaults were merged (agent/config/cli.cpp). Plain data, so tests and the agent loop can build it directly.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "rendezvous/parameters.hpp"

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

struct LaunchConfig {
  // Nodes and workers.
  int min_nodes = 1;
  int max_nodes = 1;
  std::string nproc_per_node_spec = "1";  // as given: int, cpu, gpu, auto
  int nproc_per_node = 1;                 // resolved

  // Rendezvous.
  std::string rdzv_backend = "static";
  // The backend rdzv_backend names (the launch config builder refuses any other name).
  rdzv::Backend backend() const { return rdzv::parse_backend(rdzv_backend).value_or(rdzv::Backend::kStatic); }
  std::string rdzv_endpoint;
  std::string rdzv_id = "none";  // torchrun's default is the string "none"
  std::map<std::string, std::string> rdzv_conf;
  bool standalone = false;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  std::optional<int> master_port;  // unset: the agent's worker store picks an ephemeral port
  std::optional<std::string> local_addr;

  // Restarts and monitoring.
  int max_restarts = 0;
  double monitor_interval = 0.1;  // accepted for compatibility; ctrun is event driven
  std::string start_method = "spawn";
  std::string event_log_handler = "null";

  // Workers.
  std::string role = "default";
  bool module = false;
  bool no_python = false;
  bool run_path = false;
  bool virtual_local_rank = false;
  std::optional<std::string> numa_binding;
  CpuBind cpu_bind = CpuBind::kNone;

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
  std::string signals_to_handle = "SIGTERM,SIGINT,SIGHUP,SIGQUIT";
  std::vector<int> signal_numbers;  // parsed signals_to_handle
  double shutdown_timeout = 30.0;   // seconds between the forwarded signal and SIGKILL
  // Forwarded to every worker's process group (and recorded in the event log), not a reason to stop: SIGUSR1/2
  // unless --signals-to-handle names them (then they stop the job like SIGTERM).
  std::vector<int> forwarded_signal_numbers;
  double exit_barrier_timeout = 300.0;
  double hang_timeout = 0.0;         // --hang-timeout: 0 = hangs are reported, never a failure (docs/hang.md)
  double hang_report_after = 300.0;  // --hang-report-after
  bool dry_run = false;  // print what would run, start nothing  // seconds a node that succeeded waits for the others
                         // (torchrun: 300)

  // Beyond torchrun.
  std::optional<std::string> event_log;  // one JSON line per event
  bool propagate_exit_code = false;      // exit with the root cause's code instead of torchrun's 1
  std::vector<std::string> preload;      // --preload: modules a warm process imports once (agent/preload/)
  std::optional<int> metrics_port;       // --metrics-port: Prometheus metrics (agent/metrics/); 0: a free port
  // --checkpoint-memory in bytes (agent/checkpoint/): nullopt = the default rule (memory_limit.hpp); 0 = off.
  std::optional<std::uint64_t> checkpoint_memory;

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
  bool exit_on_stdin_close = false;

  // The worker command.
  std::string script;
  std::vector<std::string> script_args;
};

}  // namespace ctrun::agent
