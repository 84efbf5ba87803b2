#include "agent/config/flags.hpp"

#include "agent/base/memory_size.hpp"
#include "agent/checkpoint/spill.hpp"

#include <algorithm>
#include <cctype>
#include <climits>
#include <csignal>

#include "agent/base/command_line.hpp"
#include "agent/config/flag_parsers.hpp"
#include "agent/hang/auto_timeout.hpp"
#include "common/text.hpp"
#include "rendezvous/parameters.hpp"

namespace ctrun::agent {
namespace {

// The field a row fills: a path of member pointers from LaunchConfig into one of its rooms, e.g.
// field<&LaunchConfig::rdzv, &RendezvousConfig::id>(c) is c.rdzv.id.
template <auto... Path>
auto& field(LaunchConfig& c) {
  // clang-format off
  return (c .* ... .* Path);
  // clang-format on
}

// Row binders for the common shapes: the field's path is the template argument, so each is a plain function pointer.
template <auto... Path>
void text_of(LaunchConfig& c, const std::string& v) {
  field<Path...>(c) = v;
}
template <auto... Path>
void bool_of(LaunchConfig& c, const std::string& v) {
  field<Path...>(c) = parse_flag_bool(v);
}
template <auto... Path>
void count_of(LaunchConfig& c, const std::string& v) {
  field<Path...>(c) = static_cast<int>(parse_flag_int(v, 0, INT_MAX, "must be >= 0"));
}
template <auto... Path>
void port_of(LaunchConfig& c, const std::string& v) {
  field<Path...>(c) = static_cast<int>(parse_flag_int(v, 0, 65535, "must be a port number, 0-65535"));
}
template <auto... Path>
void seconds_of(LaunchConfig& c, const std::string& v) {
  field<Path...>(c) = parse_flag_seconds(v, /*positive=*/false);
}
template <auto... Path>
void positive_seconds_of(LaunchConfig& c, const std::string& v) {
  field<Path...>(c) = parse_flag_seconds(v, /*positive=*/true);
}

void nnodes(LaunchConfig& c, const std::string& v) {
  std::tie(c.rdzv.min_nodes, c.rdzv.max_nodes) = rdzv::parse_nnodes(v);
}

void nproc_per_node(LaunchConfig& c, const std::string& v) {
  if (v == "xpu") throw UsageError("--nproc-per-node xpu is not supported yet by ctrun; use a count, cpu, gpu or auto");
  c.workers.nproc_per_node_spec = v;
  if (v == "cpu" || v == "gpu" || v == "auto") return;  // resolved on the node (agent/config/nproc.hpp)
  c.workers.nproc_per_node =
      static_cast<int>(parse_flag_int(v, 1, 1 << 16, "must be a positive integer, cpu, gpu or auto"));
}

void rdzv_endpoint(LaunchConfig& c, const std::string& v) {
  if (!v.empty() && v.back() == ':')
    throw FlagValueError("'" + v + "' has an empty port: give host:port, or host alone for the default");
  c.rdzv.endpoint = v;
}

void start_method(LaunchConfig& c, const std::string& v) {
  if (v != "spawn" && v != "fork" && v != "forkserver")
    throw FlagValueError("invalid choice: '" + v + "' (choose from 'spawn', 'fork', 'forkserver')");
  c.workers.start_method = v;
}

void signals_to_handle(LaunchConfig& c, const std::string& v) {
  auto& s = c.shutdown;
  s.signals_to_handle = v;
  s.signal_numbers = parse_signal_list(v);
  s.forwarded_signal_numbers.clear();
  for (int sig : {SIGUSR1, SIGUSR2}) {
    if (std::find(s.signal_numbers.begin(), s.signal_numbers.end(), sig) == s.signal_numbers.end())
      s.forwarded_signal_numbers.push_back(sig);
  }
}

void hang_timeout(LaunchConfig& c, const std::string& v) {
  c.hang.timeout_auto.reset();
  c.hang.timeout = 0;
  std::optional<hang::AutoTimeout> a;
  try {
    a = hang::parse_auto_timeout(v);
  } catch (const std::invalid_argument& e) {
    throw FlagValueError(e.what());
  }
  if (a) {
    c.hang.timeout_auto = HangConfig::Auto{.floor_s = a->floor_s, .ceiling_s = a->ceiling_s};
    return;
  }
  c.hang.timeout = parse_flag_seconds(v, /*positive=*/false);
}

// Seconds with or without a unit (90, 1.5m, 1h), > 0.
double duration_seconds(const std::string& v) {
  if (const auto s = parse_flag_duration(v)) return *s;
  return parse_flag_seconds(v, /*positive=*/true);
}

void node_cooldown(LaunchConfig& c, const std::string& v) {
  const auto parts = text::split(v, ':');
  if (parts.empty() || parts.size() > 2)
    throw FlagValueError("must be MIN or MIN:MAX (seconds, or with a unit: 30s, 5m, 1h), not '" + v + "'");
  const double low = duration_seconds(parts[0]);
  const double high = parts.size() == 2 ? duration_seconds(parts[1]) : low;
  if (high < low) throw FlagValueError("MAX must not be less than MIN in '" + v + "'");
  c.restarts.node_cooldown_min_s = low;
  c.restarts.node_cooldown_max_s = high;
}

void ssh(LaunchConfig& c, const std::string& v) {
  if (text::trim(v).empty()) throw FlagValueError("must name a command");
  c.multihost.ssh = v;
}

}  // namespace

const std::vector<FlagSpec>& flag_table() {
  using K = FlagKind;
  using C = LaunchConfig;
  constexpr bool kPet = true, kNoPet = false;
  constexpr auto kTorchrun = FlagOrigin::kTorchrun, kCtrun = FlagOrigin::kCtrun, kLauncher = FlagOrigin::kLauncher;
  static const std::vector<FlagSpec> table = {
      {"nnodes", "", K::kValue, "1:1", kPet, kTorchrun, nnodes, "Number of nodes, or MIN:MAX for an elastic range."},
      {"nproc_per_node", "", K::kValue, "1", kPet, kTorchrun, nproc_per_node,
       "Workers per node: an integer, cpu (one per CPU), gpu (one per visible GPU) or auto (gpu if any, else cpu)."},
      {"rdzv_backend", "", K::kValue, "static", kPet, kTorchrun,
       [](C& c, const std::string& v) { c.rdzv.backend = parse_rdzv_backend(v); },
       "Rendezvous backend: static, c10d or etcd (etcd v3 API; alias etcd-v3)."},
      {"rdzv_endpoint", "", K::kValue, "", kPet, kTorchrun, rdzv_endpoint,
       "Rendezvous endpoint host[:port] (etcd: host:port[,host:port...])."},
      {"rdzv_id", "", K::kValue, "none", kPet, kTorchrun, text_of<&C::rdzv, &RendezvousConfig::id>,
       "Run id shared by every node of the job."},
      {"rdzv_conf", "", K::kValue, "", kPet, kTorchrun,
       [](C& c, const std::string& v) { c.rdzv.conf = rdzv::parse_rdzv_conf(v); },
       "Rendezvous settings k1=v1,k2=v2 (blanks around keys and values are ignored)."},
      {"standalone", "", K::kBool, "0", kPet, kTorchrun, bool_of<&C::rdzv, &RendezvousConfig::standalone>,
       "Single node with no setup: local rendezvous, a free port and a fresh run id."},
      {"max_restarts", "", K::kValue, "0", kPet, kTorchrun, count_of<&C::restarts, &RestartConfig::max_restarts>,
       "Worker-group restarts on failure before giving up."},
      {"monitor_interval", "", K::kValue, "0.1", kPet, kTorchrun, positive_seconds_of<&C::restarts, &RestartConfig::monitor_interval>,
       "Seconds between checks of a multi-node round's membership (nodes waiting to join, a broken round); worker "
       "exits are handled as they happen."},
      {"start_method", "", K::kValue, "spawn", kPet, kTorchrun, start_method,
       "spawn, fork or forkserver (only matters to torchrun)."},
      {"event_log_handler", "", K::kValue, "null", kPet, kTorchrun, text_of<&C::logs, &LogConfig::event_log_handler>,
       "Accepted for compatibility (torchrun's event handler name); see --event-log."},
      {"role", "", K::kValue, "default", kPet, kTorchrun, text_of<&C::workers, &WorkerConfig::role>,
       "Worker role name (ROLE_NAME, log prefix)."},
      {"module", "m", K::kBool, "0", kPet, kTorchrun, bool_of<&C::workers, &WorkerConfig::module>,
       "Run SCRIPT as a Python module (python -u -m)."},
      {"no_python", "", K::kBool, "0", kPet, kTorchrun, bool_of<&C::workers, &WorkerConfig::no_python>,
       "Execute SCRIPT directly instead of through Python."},
      {"run_path", "", K::kBool, "0", kPet, kTorchrun, bool_of<&C::workers, &WorkerConfig::run_path>,
       "Run SCRIPT with runpy.run_path (as torchrun --run-path)."},
      {"log_dir", "", K::kValue, std::nullopt, kPet, kTorchrun, text_of<&C::logs, &LogConfig::dir>,
       "Base directory of the per-attempt worker logs."},
      {"redirects", "r", K::kValue, "0", kPet, kTorchrun,
       [](C& c, const std::string& v) { c.logs.redirects = parse_std_spec(v); },
       "Redirect worker streams to files: 0 none, 1 out, 2 err, 3 both, or a map 0:1,1:2."},
      {"tee", "t", K::kValue, "0", kPet, kTorchrun, [](C& c, const std::string& v) { c.logs.tee = parse_std_spec(v); },
       "Tee worker streams to files and the console (same syntax)."},
      {"local_ranks_filter", "", K::kValue, "", kPet, kTorchrun,
       [](C& c, const std::string& v) { c.logs.local_ranks_filter = parse_local_ranks(v); },
       "Comma-separated local ranks shown on the console."},
      {"log_line_prefix_template", "", K::kValue, std::nullopt, kPet, kTorchrun, text_of<&C::logs, &LogConfig::line_prefix_template>,
       "Tee'd line prefix with ${role_name}, ${local_rank}, ${rank}, ${hostname} (default "
       "$TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE, else [role local_rank])."},
      {"duplicate_stdout_filters", "", K::kValue, "", kPet, kTorchrun,
       [](C& c, const std::string& v) { c.logs.duplicate_stdout_filters = text::split_escaped(v, ','); },
       "Tee'd stdout lines containing any of these comma-separated strings (,, a literal comma) also go to "
       "filtered_stdout.log."},
      {"duplicate_stderr_filters", "", K::kValue, "", kPet, kTorchrun,
       [](C& c, const std::string& v) { c.logs.duplicate_stderr_filters = text::split_escaped(v, ','); },
       "Tee'd stderr lines containing any of these comma-separated strings (,, a literal comma) also go to "
       "filtered_stderr.log."},
      {"node_rank", "", K::kValue, "0", kPet, kTorchrun, count_of<&C::rdzv, &RendezvousConfig::node_rank>,
       "This node's rank (static rendezvous)."},
      {"master_addr", "", K::kValue, "127.0.0.1", kPet, kTorchrun, text_of<&C::rdzv, &RendezvousConfig::master_addr>,
       "Address of the worker store (static rendezvous)."},
      {"master_port", "", K::kValue, std::nullopt, kPet, kTorchrun, port_of<&C::rdzv, &RendezvousConfig::master_port>,
       "Port of the worker store; unset: the agent's store takes a free port."},
      {"local_addr", "", K::kValue, std::nullopt, kPet, kTorchrun, text_of<&C::rdzv, &RendezvousConfig::local_addr>, "This node's address."},
      {"logs_specs", "", K::kValue, std::nullopt, kNoPet, kTorchrun, text_of<&C::logs, &LogConfig::specs>,
       "Accepted for compatibility; ctrun always uses torchrun's default log layout."},
      {"numa_binding", "", K::kValue, std::nullopt, kNoPet, kTorchrun,
       [](C& c, const std::string& v) { c.workers.numa_binding = parse_numa_binding(v); },
       "node: bind each local rank to the CPUs of one NUMA node (as --cpu-bind numa). torchrun's socket, "
       "exclusive and core-complex follow each GPU's topology and are refused."},
      {"signals_to_handle", "", K::kValue, "SIGTERM,SIGINT,SIGHUP,SIGQUIT", kPet, kTorchrun, signals_to_handle,
       "Signals forwarded to every worker's process group."},
      {"shutdown_timeout", "", K::kValue, "30", kPet, kTorchrun, seconds_of<&C::shutdown, &ShutdownConfig::timeout>,
       "Seconds between the forwarded signal and SIGKILL (unset: $TORCH_ELASTIC_SHUTDOWN_TIMEOUT, else 30).",
       "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"},
      {"virtual_local_rank", "", K::kBool, "0", kPet, kTorchrun, bool_of<&C::workers, &WorkerConfig::virtual_local_rank>,
       "Every worker sees LOCAL_RANK=0 and only its own GPU in CUDA_VISIBLE_DEVICES."},
      // ctrun's own flags.
      {"config", "", K::kValue, std::nullopt, kPet, kCtrun, nullptr,
       "JSON file of flags (keys are flag names); the command line overrides it."},
      {"event_log", "", K::kValue, std::nullopt, kPet, kCtrun, text_of<&C::logs, &LogConfig::event_log>,
       "Write one JSON line per agent event to this file."},
      {"propagate_exit_code", "", K::kBool, "0", kPet, kCtrun, bool_of<&C::propagate_exit_code>,
       "Exit with the root-cause worker's exit code (128+N for signal N) instead of 1."},
      {"fail_on_teardown_crash", "", K::kBool, "0", kPet, kCtrun, bool_of<&C::workers, &WorkerConfig::fail_on_teardown_crash>,
       "Count a worker whose Python program ended with exit status 0 and that then crashed in native teardown "
       "(interpreter shutdown, C++ destructors) as failed, as torchrun does (default: it counts as exit 0, with a "
       "warning)."},
      {"preload", "", K::kValue, std::nullopt, kPet, kCtrun,
       [](C& c, const std::string& v) { c.workers.preload = parse_module_list(v); },
       "Modules (comma-separated) one warm Python process per node imports once; workers are forked from it with "
       "their imports done (docs/cli.md)."},
      {"checkpoint_memory", "", K::kValue, std::nullopt, kPet, kCtrun,
       [](C& c, const std::string& v) {
         c.checkpoint.memory = parse_memory_size(v);
         if (!c.checkpoint.memory)
           throw FlagValueError("must be bytes or a size like 512M or 8G (0: off), not '" + v + "'");
       },
       "Memory this node's in-memory checkpoints (ctrun_torch.checkpoint) may take: bytes or 512M, 8G, ...; 0 turns "
       "them off (default: half of the machine's memory, at most /dev/shm's free space; docs/checkpoint.md)."},
      {"checkpoint_dir", "", K::kValue, "", kPet, kCtrun,
       [](C& c, const std::string& v) {
         if (v.empty()) return;
         if (const std::string problem = checkpoint::check_spill_dir(v); !problem.empty())
           throw FlagValueError(problem);
         c.checkpoint.dir = v;
       },
       "Copy committed in-memory checkpoint steps to this directory in the background (torch DCP's file layout where "
       "torch has it), so that a job that lost every node resumes from it (docs/checkpoint.md)."},
      {"checkpoint_dir_every", "", K::kValue, "10", kPet, kCtrun,
       [](C& c, const std::string& v) {
         if (const auto seconds = parse_flag_duration(v)) {
           c.checkpoint.dir_every = 0;
           c.checkpoint.dir_every_s = *seconds;
           return;
         }
         c.checkpoint.dir_every = static_cast<int>(
             parse_flag_int(v, 1, INT_MAX, "must be a positive number of steps, or a duration like 30s, 5m, 1h"));
         c.checkpoint.dir_every_s = 0;
       },
       "--checkpoint-dir copies a step at least this many steps after the last one it copied (one copy at a time); "
       "a duration (30s, 5m, 1h): at least that long after."},
      {"checkpoint_replicas", "", K::kValue, std::nullopt, kPet, kCtrun,
       [](C& c, const std::string& v) {
         c.checkpoint.replicas = static_cast<int>(parse_flag_int(v, 0, 16, "must be a count of nodes, 0-16"));
       },
       "Other nodes each node's newest in-memory checkpoint step is copied to, on a ring over the nodes (default: 1 "
       "when the job has several nodes; 0: no copies; docs/checkpoint.md)."},
      {"cpu_bind", "", K::kValue, "none", kPet, kCtrun,
       [](C& c, const std::string& v) { c.workers.cpu_bind = parse_cpu_bind(v); },
       "Bind each local rank to a slice of the machine: none, core or numa."},
      // Clusters (agent/cluster/, agent/multihost/; docs/cli.md "Clusters").
      {"no_slurm", "", K::kBool, "0", kPet, kCtrun, nullptr,
       "Do not derive --nnodes, --node-rank, the endpoint, ... from SLURM_* variables."},
      {"hostfile", "", K::kValue, std::nullopt, kNoPet, kLauncher,
       [](C& c, const std::string& v) { c.multihost.hostfile = v; },
       "Start one agent per host of this file (lines `host slots=N`, # comments) over ssh."},
      {"hosts", "", K::kValue, std::nullopt, kNoPet, kLauncher, [](C& c, const std::string& v) { c.multihost.hosts = v; },
       "Start one agent per host of this comma-separated list (host or host:slots) over ssh."},
      {"include", "", K::kValue, std::nullopt, kNoPet, kLauncher,
       [](C& c, const std::string& v) { c.multihost.include = v; },
       "Only these hosts (and slots) of --hostfile/--hosts: host1:0,2@host2 (DeepSpeed's syntax)."},
      {"exclude", "", K::kValue, std::nullopt, kNoPet, kLauncher,
       [](C& c, const std::string& v) { c.multihost.exclude = v; },
       "Leave out these hosts (or only these slots): host1:1@host3 (DeepSpeed's syntax)."},
      {"ssh", "", K::kValue, "ssh -o BatchMode=yes -o ConnectTimeout=10", kNoPet, kLauncher, ssh,
       "Command that runs a command on a host (the host and the command are appended)."},
      {"export", "", K::kList, "", kNoPet, kLauncher, [](C& c, const std::string& v) { c.multihost.exports = v; },
       "Comma-separated NAME or NAME=VALUE set on every host (besides the .ctrun_env files)."},
      {"secret_file", "", K::kValue, "", kPet, kLauncher, text_of<&C::secret_file>,
       "File holding the job's secret, the same on every node (or CTRUN_SECRET, --rdzv-conf secret_file=; -: the "
       "first line of stdin): agents prove it to each other before any store or checkpoint traffic "
       "(docs/security.md). --hostfile/--hosts make one per job."},
      {"exit_on_stdin_close", "", K::kBool, "0", kNoPet, kLauncher, bool_of<&C::multihost, &MultiHostConfig::exit_on_stdin_close>,
       "Stop the agent and its workers when stdin closes (what --hostfile runs on each host)."},
      {"dry_run", "", K::kBool, "0", kPet, kCtrun, bool_of<&C::dry_run>,
       "Print the resolved configuration and every local worker's command and environment; start nothing."},
      {"exit_barrier_timeout", "", K::kValue, "300", kPet, kCtrun, seconds_of<&C::shutdown, &ShutdownConfig::exit_barrier_timeout>,
       "Seconds a node that succeeded waits for the others before exiting (unset: "
       "$TORCH_ELASTIC_EXIT_BARRIER_TIMEOUT, else 300, torchrun's fixed value).",
       "TORCH_ELASTIC_EXIT_BARRIER_TIMEOUT"},
      {"stop_without_progress", "", K::kValue, "0", kPet, kCtrun,
       count_of<&C::restarts, &RestartConfig::stop_without_progress>,
       "Stop (exit 3) instead of restarting once N restarts in a row made no progress: no newer in-memory "
       "checkpoint step (ctrun_torch.checkpoint) committed by every local rank, or, in a job without one, fewer than "
       "10 collectives of backend ctrun completed; 0: off."},
      {"max_node_failures", "", K::kValue, std::nullopt, kPet, kCtrun,
       [](C& c, const std::string& v) {
         c.restarts.max_node_failures = static_cast<int>(parse_flag_int(v, 0, INT_MAX, "must be >= 0"));
       },
       "Elastic rendezvous: a node whose workers fail first in their round this many times within "
       "--node-failure-window steps out of the job for a cooldown, when the others can go on without it "
       "(unset: --max-restarts; 0: never)."},
      {"node_failure_window", "", K::kValue, "1h", kPet, kCtrun,
       [](C& c, const std::string& v) { c.restarts.node_failure_window_s = duration_seconds(v); },
       "The window --max-node-failures counts in: seconds, or 30m, 2h."},
      {"node_cooldown", "", K::kValue, "60:600", kPet, kCtrun, node_cooldown,
       "MIN:MAX seconds (or 1m:10m) a stepped-out node stays out: MIN the first time, doubled each time after, at "
       "most MAX; then it joins again as a spare."},
      {"health_check", "", K::kValue, std::nullopt, kPet, kCtrun,
       [](C& c, const std::string& v) {
         if (text::trim(v).empty()) throw FlagValueError("must name a command");
         c.health.command = v;
       },
       "Shell command run before this node joins each round; a non-zero exit or a timeout keeps the node out (its "
       "output logged), retried with backoff until the rendezvous' join_timeout, then exit 4."},
      {"health_check_timeout", "", K::kValue, "60", kPet, kCtrun, positive_seconds_of<&C::health, &HealthConfig::timeout>,
       "Seconds --health-check may run before it is killed and counted as failed."},
      {"health_min_free", "", K::kValue, "1M", kPet, kCtrun,
       [](C& c, const std::string& v) {
         const auto bytes = parse_memory_size(v);
         if (!bytes) throw FlagValueError("must be bytes or a size like 100M or 2G (0: off), not '" + v + "'");
         c.health.min_free = *bytes;
       },
       "Free space the built-in health checks want for the log directory before this node joins a round (/dev/shm: "
       "1 MiB at most); 0: not checked."},
      {"no_builtin_health_checks", "", K::kBool, "0", kPet, kCtrun, bool_of<&C::health, &HealthConfig::no_builtin_checks>,
       "Skip the built-in health checks (free space for logs and /dev/shm, --checkpoint-memory's room, the GPUs "
       "the job expects) before each round."},
      {"hang_timeout", "", K::kValue, "0", kPet, kCtrun, hang_timeout,
       "Seconds ranks may wait in a collective another rank has not entered before that rank is treated as "
       "failed (its stack dumped, the restart policy applied); 0: hangs are only reported; auto[:FLOOR[:CEILING]]: "
       "4 times the longest gap between completed collectives, learned each attempt, within 120-1200 s "
       "(docs/hang.md)."},
      {"hang_report_after", "", K::kValue, "300", kPet, kCtrun, positive_seconds_of<&C::hang, &HangConfig::report_after>,
       "Seconds of such a wait before ctrun reports it and dumps the local ranks' Python stacks."},
      {"straggler_interval", "", K::kValue, "300", kPet, kCtrun, positive_seconds_of<&C::hang, &HangConfig::straggler_interval>,
       "Seconds of each window in which ctrun compares the ranks' pace and names the slowest "
       "(unset: $CTRUN_STRAGGLER_INTERVAL, else 300).",
       "CTRUN_STRAGGLER_INTERVAL"},
      {"store_relay", "", K::kValue, "on", kPet, kCtrun,
       [](C& c, const std::string& v) {
         if (v == "on" || v == "off") {
           c.rdzv.store_relay = v == "on";
           return;
         }
         try {
           c.rdzv.store_relay = parse_flag_bool(v);
         } catch (const FlagValueError&) {
           throw FlagValueError("must be on or off, not '" + v + "'");
         }
       },
       "With several nodes, this node's workers reach the job's store through a relay in this agent: one "
       "connection per node at the store, identical requests of the node's ranks sent once (docs/cli.md); off: "
       "each worker connects to MASTER_ADDR:MASTER_PORT itself."},
      {"metrics_port", "", K::kValue, std::nullopt, kPet, kCtrun, port_of<&C::metrics_port>,
       "Serve Prometheus metrics at http://ADDR:PORT/metrics, ADDR being where the workers' store binds (0: a free "
       "port, in the log and the event log); off unless given."},
  };
  return table;
}

LaunchConfig::LaunchConfig() {
  for (const auto& f : flag_table()) {
    if (f.bind != nullptr && f.default_value) f.bind(*this, std::string(*f.default_value));
  }
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
