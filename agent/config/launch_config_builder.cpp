#include "agent/config/launch_config_builder.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <random>
#include <regex>

#include "agent/base/signal_names.hpp"
#include "agent/checkpoint/memory_size.hpp"
#include "agent/config/flags.hpp"
#include "agent/launch/rendezvous_factory.hpp"
#include "common/text.hpp"
#include "rendezvous/etcd/etcd_options.hpp"

namespace ctrun::agent {
namespace {

[[noreturn]] void bad(const std::string& dest, const std::string& what) {
  throw UsageError("argument " + dashed_name(dest) + ": " + what);
}

[[noreturn]] void not_supported_yet(const std::string& what) {
  throw UsageError(what + " is not supported yet by ctrun; use --rdzv-backend c10d or static");
}

long long to_int(const std::string& dest, const std::string& text) {
  long long v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || p != text.data() + text.size()) bad(dest, "invalid int value: '" + text + "'");
  return v;
}

double to_double(const std::string& dest, const std::string& text) {
  try {
    size_t used = 0;
    double v = std::stod(text, &used);
    if (used == text.size()) return v;
  } catch (const std::exception&) {
  }
  bad(dest, "invalid float value: '" + text + "'");
}

// Resolves one flag's value with torchrun's precedence plus the config file: CLI > file > PET_* > default.
class Values {
 public:
  Values(const CommandLine& cli, const std::map<std::string, std::string>& file, const EnvLookup& env)
      : cli_(cli), file_(file), env_(env) {}

  std::optional<std::string> get(const std::string& dest) const {
    if (auto it = cli_.values.find(dest); it != cli_.values.end()) return it->second;
    if (auto it = file_.find(dest); it != file_.end()) return it->second;
    const FlagSpec* f = find_flag(dest);
    if (f->pet) {
      if (auto v = env_(pet_name(dest))) return *v;
    }
    if (f->default_value) return std::string(*f->default_value);
    return std::nullopt;
  }
  std::string str(const std::string& dest) const { return get(dest).value_or(""); }
  // torchrun's check_env: bool(int(value)); "true" is an error there, and here.
  bool flag(const std::string& dest) const {
    std::string v = str(dest);
    if (v == "true" || v == "True") return true;  // JSON config booleans arrive as 1/0; be lenient only here
    if (v == "false" || v == "False") return false;
    if (v.empty()) return false;
    long long n = 0;
    auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
    if (ec != std::errc() || p != v.data() + v.size()) {
      throw UsageError(pet_name(dest) + " must be an integer (0 or 1), got '" + v + "'");
    }
    return n != 0;
  }

 private:
  const CommandLine& cli_;
  const std::map<std::string, std::string>& file_;
  const EnvLookup& env_;
};

void parse_signals(LaunchConfig& c) {
  c.signal_numbers.clear();
  for (const auto& name : text::split(c.signals_to_handle, ',')) {
    std::string trimmed = name;
    trimmed.erase(0, trimmed.find_first_not_of(' '));
    trimmed.erase(trimmed.find_last_not_of(' ') + 1);
    if (trimmed.empty()) continue;
    auto sig = signal_number(trimmed);
    if (!sig) bad("signals_to_handle", "unknown signal '" + trimmed + "' (use names like SIGTERM,SIGUSR1)");
    if (*sig == SIGKILL || *sig == SIGSTOP || *sig == SIGCHLD) {
      bad("signals_to_handle", trimmed + " cannot be handled");
    }
    c.signal_numbers.push_back(*sig);
  }
}

// The rendezvous library's own checks (--rdzv-conf values, the endpoint), run before anything is opened.
void validate_rendezvous(const LaunchConfig& c) {
  try {
    rdzv::RendezvousParameters p = rendezvous_parameters(c);
    if (c.backend() == rdzv::Backend::kEtcd) {
      rdzv::etcd::parse_options(p);  // every endpoint, protocol, TLS files, lease_ttl
      rdzv::c10d_settings(p);        // the same timeouts as c10d
    } else if (!c.rdzv_endpoint.empty()) {
      rdzv::parse_endpoint(c.rdzv_endpoint,
                           c.backend() == rdzv::Backend::kC10d ? rdzv::kDefaultC10dPort : rdzv::kDefaultMasterPort);
    }
    if (c.backend() == rdzv::Backend::kC10d) rdzv::c10d_settings(p);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
}

}  // namespace

std::string random_run_id() {
  std::random_device rd;
  std::uniform_int_distribution<unsigned> byte(0, 255);
  unsigned char b[16];
  for (auto& x : b) x = static_cast<unsigned char>(byte(rd));
  b[6] = static_cast<unsigned char>((b[6] & 0x0f) | 0x40);  // version 4
  b[8] = static_cast<unsigned char>((b[8] & 0x3f) | 0x80);  // variant 1
  char out[37];
  std::snprintf(out, sizeof out, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return out;
}

StdSpec parse_std_spec(const std::string& flag, const std::string& text) {
  StdSpec spec;
  static const std::regex single("^[0-3]$");
  static const std::regex map("^(\\d:[0123],)*(\\d:[0123])$");
  if (std::regex_match(text, single)) {
    spec.all = text[0] - '0';
    return spec;
  }
  if (!std::regex_match(text, map)) {
    bad(flag, "'" + text + "' is neither 0-3 nor a map of single-digit local ranks like 0:1,1:2");
  }
  spec.is_map = true;
  for (const auto& item : text::split(text, ',')) spec.per_rank[item[0] - '0'] = item[2] - '0';
  return spec;
}

std::map<std::string, std::string> parse_rdzv_conf(const std::string& text) {
  std::map<std::string, std::string> out;
  if (text.empty()) return out;
  for (const auto& item : text::split(text, ',')) {
    auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == item.size()) {
      bad("rdzv_conf", "'" + item + "' is not key=value (expected k1=v1,k2=v2)");
    }
    out[item.substr(0, eq)] = item.substr(eq + 1);
  }
  return out;
}

std::pair<int, int> parse_nnodes(const std::string& text) {
  auto parts = text::split(text, ':');
  if (parts.size() > 2) bad("nnodes", "'" + text + "' should be N or MIN:MAX");
  int lo = static_cast<int>(to_int("nnodes", parts[0]));
  int hi = parts.size() == 2 ? static_cast<int>(to_int("nnodes", parts[1])) : lo;
  if (lo <= 0 || lo > hi) bad("nnodes", "'" + text + "' needs 0 < MIN <= MAX");
  return {lo, hi};
}

std::vector<std::string> parse_duplicate_filters(const std::string& text) {
  return text::split_escaped(text, ',');  // torchrun: comma separated, ",," stands for a literal comma
}

LaunchConfig build_launch_config(const CommandLine& cli, const std::map<std::string, std::string>& file_values,
                                 const EnvLookup& env) {
  Values v(cli, file_values, env);
  LaunchConfig c;
  c.script = cli.script;
  c.script_args = cli.script_args;

  std::tie(c.min_nodes, c.max_nodes) = parse_nnodes(v.str("nnodes"));
  c.nproc_per_node_spec = v.str("nproc_per_node");
  if (c.nproc_per_node_spec == "xpu") not_supported_yet("--nproc-per-node xpu");
  if (c.nproc_per_node_spec != "cpu" && c.nproc_per_node_spec != "gpu" && c.nproc_per_node_spec != "auto") {
    long long n = to_int("nproc_per_node", c.nproc_per_node_spec);
    if (n <= 0 || n > 1 << 16) bad("nproc_per_node", "must be a positive integer, cpu, gpu or auto");
    c.nproc_per_node = static_cast<int>(n);
  }

  c.standalone = v.flag("standalone");
  c.rdzv_backend = v.str("rdzv_backend");
  c.rdzv_endpoint = v.str("rdzv_endpoint");
  if (!c.rdzv_endpoint.empty() && c.rdzv_endpoint.back() == ':')
    bad("rdzv_endpoint", "'" + c.rdzv_endpoint + "' has an empty port: give host:port, or host alone for the default");
  c.rdzv_id = v.str("rdzv_id");
  c.rdzv_conf = parse_rdzv_conf(v.str("rdzv_conf"));
  if (c.standalone) {
    // As torchrun: explicit rendezvous settings are replaced by a local one with a fresh run id.
    c.rdzv_backend = "c10d";
    c.rdzv_endpoint = "localhost:0";
    c.rdzv_id = random_run_id();
    c.min_nodes = c.max_nodes = 1;
  }
  if (c.rdzv_backend == "etcd-v2") throw UsageError(rdzv::kEtcdV2Refused);
  if (!rdzv::parse_backend(c.rdzv_backend)) {
    bad("rdzv_backend", "unknown backend '" + c.rdzv_backend + "' (static, c10d or etcd)");
  }
  c.node_rank = static_cast<int>(to_int("node_rank", v.str("node_rank")));
  if (c.node_rank < 0) bad("node_rank", "must be >= 0");
  if (c.backend() == rdzv::Backend::kStatic) {
    // As torchrun: the static backend has no elasticity, and the node rank picks one of exactly N places.
    if (c.min_nodes != c.max_nodes) {
      bad("nnodes", "'" + v.str("nnodes") + "': MIN:MAX needs --rdzv-backend c10d (static needs a fixed N)");
    }
    if (c.node_rank >= c.max_nodes) {
      bad("node_rank", std::to_string(c.node_rank) + " must be smaller than --nnodes " + std::to_string(c.max_nodes));
    }
  } else if (c.backend() == rdzv::Backend::kEtcd && c.rdzv_endpoint.empty()) {
    bad("rdzv_endpoint", "--rdzv-backend etcd needs --rdzv-endpoint host:port[,host:port...] (etcd's client URLs)");
  } else if (!c.standalone && c.max_nodes > 1 && c.rdzv_endpoint.empty()) {
    bad("rdzv_endpoint", "--rdzv-backend c10d with several nodes needs --rdzv-endpoint host[:port]");
  }
  c.master_addr = v.str("master_addr");
  if (auto port = v.get("master_port")) {
    long long p = to_int("master_port", *port);
    if (p < 0 || p > 65535) bad("master_port", "must be 0..65535");
    c.master_port = static_cast<int>(p);
  }
  if (c.standalone) c.master_port.reset();  // --standalone picks a free port
  c.local_addr = v.get("local_addr");
  validate_rendezvous(c);

  long long restarts = to_int("max_restarts", v.str("max_restarts"));
  if (restarts < 0) bad("max_restarts", "must be >= 0");
  c.max_restarts = static_cast<int>(restarts);
  c.monitor_interval = to_double("monitor_interval", v.str("monitor_interval"));
  if (!(c.monitor_interval > 0)) bad("monitor_interval", "must be > 0");
  c.start_method = v.str("start_method");
  if (c.start_method != "spawn" && c.start_method != "fork" && c.start_method != "forkserver") {
    bad("start_method", "invalid choice: '" + c.start_method + "' (choose from 'spawn', 'fork', 'forkserver')");
  }
  c.event_log_handler = v.str("event_log_handler");

  c.role = v.str("role");
  c.module = v.flag("module");
  c.no_python = v.flag("no_python");
  c.run_path = v.flag("run_path");
  if (c.module && c.no_python) {
    throw UsageError("Don't use both the '--no-python' flag and the '--module' flag at the same time.");
  }
  if (c.run_path && c.module) throw UsageError("Don't use both the '--run-path' flag and the '--module' flag.");
  c.virtual_local_rank = v.flag("virtual_local_rank");
  c.numa_binding = v.get("numa_binding");
  if (c.numa_binding && *c.numa_binding != "node" && *c.numa_binding != "socket" && *c.numa_binding != "exclusive" &&
      *c.numa_binding != "core-complex") {
    bad("numa_binding", "invalid choice: '" + *c.numa_binding + "' (node, socket, exclusive, core-complex)");
  }
  std::string cpu_bind = v.str("cpu_bind");
  if (cpu_bind == "none") {
    c.cpu_bind = CpuBind::kNone;
  } else if (cpu_bind == "core") {
    c.cpu_bind = CpuBind::kCore;
  } else if (cpu_bind == "numa") {
    c.cpu_bind = CpuBind::kNuma;
  } else {
    bad("cpu_bind", "invalid choice: '" + cpu_bind + "' (none, core, numa)");
  }

  c.log_dir = v.get("log_dir");
  c.log_line_prefix_template = v.get("log_line_prefix_template");
  c.redirects = parse_std_spec("redirects", v.str("redirects"));
  c.tee = parse_std_spec("tee", v.str("tee"));
  for (const auto& r : text::split(v.str("local_ranks_filter"), ',')) {
    if (r.empty()) continue;
    long long n = to_int("local_ranks_filter", r);
    if (n < 0) bad("local_ranks_filter", "local ranks are >= 0");
    c.local_ranks_filter.push_back(static_cast<int>(n));
  }
  c.duplicate_stdout_filters = parse_duplicate_filters(v.str("duplicate_stdout_filters"));
  c.duplicate_stderr_filters = parse_duplicate_filters(v.str("duplicate_stderr_filters"));
  c.logs_specs = v.get("logs_specs");

  c.signals_to_handle = v.str("signals_to_handle");
  parse_signals(c);
  std::string timeout = v.get("shutdown_timeout").value_or(env("TORCH_ELASTIC_SHUTDOWN_TIMEOUT").value_or("30"));
  c.shutdown_timeout = to_double("shutdown_timeout", timeout);
  if (c.shutdown_timeout < 0) bad("shutdown_timeout", "must be >= 0 seconds");
  std::string barrier =
      v.get("exit_barrier_timeout").value_or(env("TORCH_ELASTIC_EXIT_BARRIER_TIMEOUT").value_or("300"));
  c.exit_barrier_timeout = to_double("exit_barrier_timeout", barrier);
  if (!(c.exit_barrier_timeout >= 0)) bad("exit_barrier_timeout", "must be >= 0 seconds");
  c.hang_timeout = to_double("hang_timeout", v.str("hang_timeout"));
  if (!(c.hang_timeout >= 0)) bad("hang_timeout", "must be >= 0 seconds (0: report hangs only)");
  c.hang_report_after = to_double("hang_report_after", v.str("hang_report_after"));
  if (!(c.hang_report_after > 0)) bad("hang_report_after", "must be > 0 seconds");
  c.dry_run = v.flag("dry_run");
  c.forwarded_signal_numbers.clear();
  for (int sig : {SIGUSR1, SIGUSR2}) {
    if (std::find(c.signal_numbers.begin(), c.signal_numbers.end(), sig) == c.signal_numbers.end())
      c.forwarded_signal_numbers.push_back(sig);
  }

  c.event_log = v.get("event_log");
  if (auto port = v.get("metrics_port")) {
    const long long n = to_int("metrics_port", *port);
    if (n < 0 || n > 65535) bad("metrics_port", "must be a port number, 0-65535 (0: a free port)");
    c.metrics_port = static_cast<int>(n);
  }
  if (auto memory = v.get("checkpoint_memory")) {
    c.checkpoint_memory = checkpoint::parse_memory_size(*memory);
    if (!c.checkpoint_memory)
      bad("checkpoint_memory", "must be bytes or a size like 512M or 8G (0: off), not '" + *memory + "'");
  }
  c.propagate_exit_code = v.flag("propagate_exit_code");
  for (const auto& m : text::split(v.str("preload"), ',')) {
    if (m.empty()) continue;
    // A dotted module name: anything else would reach `importlib.import_module` as a surprise.
    const bool valid =
        std::all_of(m.begin(), m.end(),
                    [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '.'; }) &&
        !std::isdigit(static_cast<unsigned char>(m[0])) && m.front() != '.' && m.back() != '.';
    if (!valid) bad("preload", "'" + m + "' is not a module name (MODULE[,MODULE...], e.g. torch,numpy)");
    c.preload.push_back(m);
  }

  c.multihost.hostfile = v.get("hostfile");
  c.multihost.hosts = v.get("hosts");
  if (c.multihost.hostfile && c.multihost.hosts) throw UsageError("use either --hostfile or --hosts, not both");
  c.multihost.include = v.get("include");
  c.multihost.exclude = v.get("exclude");
  c.multihost.ssh = v.str("ssh");
  if (c.multihost.ssh.find_first_not_of(' ') == std::string::npos) bad("ssh", "must name a command");
  c.multihost.exports = v.str("export");
  c.exit_on_stdin_close = v.flag("exit_on_stdin_close");

  if (c.run_path) {
    // torchrun's runpy.run_path needs an absolute path; make it one rather than fail.
    c.script = std::filesystem::absolute(c.script).string();
  }
  return c;
}

}  // namespace ctrun::agent
