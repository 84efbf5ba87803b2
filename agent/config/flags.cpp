#include "agent/config/flags.hpp"

#include <algorithm>
#include <cctype>

namespace ctrun::agent {

const std::vector<FlagSpec>& flag_table() {
  using K = FlagKind;
  static const std::vector<FlagSpec> table = {
      {"nnodes", "", K::kValue, "1:1", true, true, "Number of nodes, or MIN:MAX for an elastic range."},
      {"nproc_per_node", "", K::kValue, "1", true, true,
       "Workers per node: an integer, cpu (one per CPU), gpu (one per visible GPU) or auto (gpu if any, else cpu)."},
      {"rdzv_backend", "", K::kValue, "static", true, true,
       "Rendezvous backend: static, c10d or etcd (etcd v3 API; alias etcd-v3)."},
      {"rdzv_endpoint", "", K::kValue, "", true, true,
       "Rendezvous endpoint host[:port] (etcd: host:port[,host:port...])."},
      {"rdzv_id", "", K::kValue, "none", true, true, "Run id shared by every node of the job."},
      {"rdzv_conf", "", K::kValue, "", true, true, "Rendezvous settings k1=v1,k2=v2."},
      {"standalone", "", K::kBool, "0", true, true,
       "Single node with no setup: local rendezvous, a free port and a fresh run id."},
      {"max_restarts", "", K::kValue, "0", true, true, "Worker-group restarts on failure before giving up."},
      {"monitor_interval", "", K::kValue, "0.1", true, true,
       "Accepted for compatibility; ctrun reacts to worker exits as they happen."},
      {"start_method", "", K::kValue, "spawn", true, true, "spawn, fork or forkserver (only matters to torchrun)."},
      {"event_log_handler", "", K::kValue, "null", true, true,
       "Accepted for compatibility (torchrun's event handler name); see --event-log."},
      {"role", "", K::kValue, "default", true, true, "Worker role name (ROLE_NAME, log prefix)."},
      {"module", "m", K::kBool, "0", true, true, "Run SCRIPT as a Python module (python -u -m)."},
      {"no_python", "", K::kBool, "0", true, true, "Execute SCRIPT directly instead of through Python."},
      {"run_path", "", K::kBool, "0", true, true, "Run SCRIPT with runpy.run_path (as torchrun --run-path)."},
      {"log_dir", "", K::kValue, std::nullopt, true, true, "Base directory of the per-attempt worker logs."},
      {"redirects", "r", K::kValue, "0", true, true,
       "Redirect worker streams to files: 0 none, 1 out, 2 err, 3 both, or a map 0:1,1:2."},
      {"tee", "t", K::kValue, "0", true, true, "Tee worker streams to files and the console (same syntax)."},
      {"local_ranks_filter", "", K::kValue, "", true, true, "Comma-separated local ranks shown on the console."},
      {"log_line_prefix_template", "", K::kValue, std::nullopt, true, true,
       "Tee'd line prefix with ${role_name}, ${local_rank}, ${rank}, ${hostname} (default "
       "$TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE, else [role local_rank])."},
      {"duplicate_stdout_filters", "", K::kValue, "", true, true,
       "Tee'd stdout lines containing any of these comma-separated strings also go to filtered_stdout.log."},
      {"duplicate_stderr_filters", "", K::kValue, "", true, true,
       "Tee'd stderr lines containing any of these comma-separated strings also go to filtered_stderr.log."},
      {"node_rank", "", K::kValue, "0", true, true, "This node's rank (static rendezvous)."},
      {"master_addr", "", K::kValue, "127.0.0.1", true, true, "Address of the worker store (static rendezvous)."},
      {"master_port", "", K::kValue, std::nullopt, true, true,
       "Port of the worker store; unset: the agent's store takes a free port."},
      {"local_addr", "", K::kValue, std::nullopt, true, true, "This node's address."},
      {"logs_specs", "", K::kValue, std::nullopt, false, true,
       "Accepted for compatibility; ctrun always uses torchrun's default log layout."},
      {"numa_binding", "", K::kValue, std::nullopt, false, true,
       "node, socket, exclusive or core-complex: bind each worker's CPUs."},
      {"signals_to_handle", "", K::kValue, "SIGTERM,SIGINT,SIGHUP,SIGQUIT", true, true,
       "Signals forwarded to every worker's process group."},
      {"shutdown_timeout", "", K::kValue, std::nullopt, true, true,
       "Seconds between the forwarded signal and SIGKILL (default $TORCH_ELASTIC_SHUTDOWN_TIMEOUT or 30)."},
      {"virtual_local_rank", "", K::kBool, "0", true, true,
       "Every worker sees LOCAL_RANK=0 and only its own GPU in CUDA_VISIBLE_DEVICES."},
      // ctrun's own flags.
      {"config", "", K::kValue, std::nullopt, true, false,
       "JSON file of flags (keys are flag names); the command line overrides it."},
      {"event_log", "", K::kValue, std::nullopt, true, false, "Write one JSON line per agent event to this file."},
      {"propagate_exit_code", "", K::kBool, "0", true, false,
       "Exit with the root-cause worker's exit code (128+N for signal N) instead of 1."},
      {"preload", "", K::kValue, std::nullopt, true, false,
       "Modules (comma-separated) one warm Python process per node imports once; workers are forked from it with "
       "their imports done (docs/cli.md)."},
      {"checkpoint_memory", "", K::kValue, std::nullopt, true, false,
       "Memory this node's in-memory checkpoints (ctrun_torch.checkpoint) may take: bytes or 512M, 8G, ...; 0 turns "
       "them off (default: half of the machine's memory, at most /dev/shm's free space; docs/checkpoint.md)."},
      {"cpu_bind", "", K::kValue, "none", true, false,
       "Bind each local rank to a slice of the machine: none, core or numa."},
      // Clusters (agent/cluster/, agent/multihost/; docs/cli.md "Clusters").
      {"no_slurm", "", K::kBool, "0", true, false,
       "Do not derive --nnodes, --node-rank, the endpoint, ... from SLURM_* variables."},
      {"hostfile", "", K::kValue, std::nullopt, false, false,
       "Start one agent per host of this file (lines `host slots=N`, # comments) over ssh."},
      {"hosts", "", K::kValue, std::nullopt, false, false,
       "Start one agent per host of this comma-separated list (host or host:slots) over ssh."},
      {"include", "", K::kValue, std::nullopt, false, false,
       "Only these hosts (and slots) of --hostfile/--hosts: host1:0,2@host2 (DeepSpeed's syntax)."},
      {"exclude", "", K::kValue, std::nullopt, false, false,
       "Leave out these hosts (or only these slots): host1:1@host3 (DeepSpeed's syntax)."},
      {"ssh", "", K::kValue, "ssh -o BatchMode=yes -o ConnectTimeout=10", false, false,
       "Command that runs a command on a host (the host and the command are appended)."},
      {"export", "", K::kList, "", false, false,
       "Comma-separated NAME or NAME=VALUE set on every host (besides the .ctrun_env files)."},
      {"exit_on_stdin_close", "", K::kBool, "0", false, false,
       "Stop the agent and its workers when stdin closes (what --hostfile runs on each host)."},
      {"dry_run", "", K::kBool, "0", true, false,
       "Print the resolved configuration and every local worker's command and environment; start nothing."},
      {"exit_barrier_timeout", "", K::kValue, std::nullopt, true, false,
       "Seconds a node that succeeded waits for the others before exiting (default "
       "$TORCH_ELASTIC_EXIT_BARRIER_TIMEOUT or 300, torchrun's fixed value)."},
      {"hang_timeout", "", K::kValue, "0", true, false,
       "Seconds ranks may wait in a collective another rank has not entered before that rank is treated as "
       "failed (its stack dumped, the restart policy applied); 0: hangs are only reported (docs/hang.md)."},
      {"hang_report_after", "", K::kValue, "300", true, false,
       "Seconds of such a wait before ctrun reports it and dumps the local ranks' Python stacks."},
      {"metrics_port", "", K::kValue, std::nullopt, true, false,
       "Serve Prometheus metrics at http://ADDR:PORT/metrics, ADDR being where the workers' store binds (0: a free "
       "port, in the log and the event log); off unless given."},
  };
  return table;
}

const FlagSpec* find_flag(std::string_view dest) {
  const auto& table = flag_table();
  auto it = std::find_if(table.begin(), table.end(), [&](const FlagSpec& f) { return f.dest == dest; });
  return it == table.end() ? nullptr : &*it;
}

std::string dashed_name(std::string_view dest) {
  std::string out = "--";
  for (char c : dest) out += c == '_' ? '-' : c;
  return out;
}

std::string underscored_name(std::string_view dest) { return "--" + std::string(dest); }

std::string pet_name(std::string_view dest) {
  std::string out = "PET_";
  for (char c : dest) out += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace ctrun::agent
