// ctrun [options] SCRIPT [script args...]: torchrun's command line, one node or many, no orphaned workers.
// Exit codes: 0 success, 1 a worker failed (or --propagate-exit-code: its code), 2 a bad command line, 3 restarts
// made no progress (--stop-without-progress).

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "agent/agent.hpp"
#include "agent/config/cli.hpp"
#include "agent/config/dry_run.hpp"
#include "agent/config/job_secret.hpp"
#include "agent/config/nproc.hpp"
#include "agent/logs/log_sink.hpp"
#include "agent/multihost/launcher.hpp"
#include "agent/multihost/stdin_watch.hpp"
#include "agent/process/escapees.hpp"
#include "agent/process/guardian.hpp"
#include "agent/status/status_client.hpp"
#include "common/log.hpp"

namespace {

// torchrun's warning, word for word, so that users and log scrapers recognise it.
constexpr const char* kOmpWarning =
    "\n*****************************************\n"
    "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid your system "
    "being overloaded, please further tune the variable for optimal performance in your application as needed. \n"
    "*****************************************";

}  // namespace

int main(int argc, char** argv) {
  using namespace ctrun::agent;
  std::vector<std::string> args(argv + 1, argv + argc);
  auto env = process_env();
  // `ctrun --status ...` reads a running job's live table; it starts nothing.
  if (!args.empty() && args.front().starts_with("--status")) {
    std::vector<std::string> rest(args.begin() + 1, args.end());
    if (args.front().starts_with("--status=")) rest.insert(rest.begin(), args.front().substr(9));
    if (args.front() == "--status" || args.front().starts_with("--status=")) return status_main(rest, env);
  }
  auto log = ctrun::log::get("agent");
  LaunchConfig config;
  try {
    config = parse_command_line(args, env);
    // On each host of a --hostfile launch: the agent runs as a child that is stopped when ssh's stdin closes.
    if (config.multihost.exit_on_stdin_close) {
      return multihost::run_agent_watching_stdin(multihost::without_stdin_watch_flag(args),
                                                 config.shutdown.timeout + 5.0, config.secret_file == "-");
    }
    if (config.multihost.enabled()) {
      // Not a rule between flags but about who started this agent: the launcher's marker in the environment.
      if (env(multihost::kLaunchedMarker)) {
        throw UsageError("this agent was started by --hostfile/--hosts and names hosts itself (through --config?)");
      }
      return multihost::run_multihost(config, lex_command_line(args), env);
    }
    config.workers.nproc_per_node = resolve_nproc_per_node(config.workers.nproc_per_node_spec, env);
    resolve_job_secret(config, env);  // before any thread: it takes CTRUN_SECRET out of the environment
  } catch (const HelpRequested& help) {
    std::fputs(help.what(), stdout);
    return 0;
  } catch (const UsageError& e) {
    const bool status_later = std::find(args.begin(), args.end(), "--status") != args.end();
    std::fprintf(stderr, "%s\nctrun: error: %s%s\n", usage_line().c_str(), e.what(),
                 status_later ? " (--status goes first: ctrun --status [--json|--stacks] [TARGET])" : "");
    return 2;
  }
  // What Slurm / MPI / Kubeflow variables decided, in one line (explicit flags always win).
  if (!config.cluster_summary.empty()) std::fprintf(stderr, "%s\n", config.cluster_summary.c_str());
  if (config.dry_run) {
    try {
      std::fputs(dry_run_report(config, env).c_str(), stdout);
      return 0;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s\nctrun: error: %s\n", usage_line().c_str(), e.what());
      return 2;
    }
  }
  if (config.logs.specs)
    log->warn("--logs-specs {} is not applicable to ctrun (torchrun's layout is used)", *config.logs.specs);
  if (config.logs.event_log_handler != "null") {
    log->warn("--event-log-handler {} is not applicable to ctrun; use --event-log FILE", config.logs.event_log_handler);
  }
  if (config.rdzv.backend != ctrun::rdzv::Backend::kStatic && !config.rdzv.standalone && config.rdzv.endpoint.empty()) {
    log->warn("master_addr is only used for static rdzv_backend and when rdzv_endpoint is not specified.");
  }
  if (const std::string doors = open_doors_warning(config); !doors.empty()) log->warn("{}", doors);
  if (std::getenv("OMP_NUM_THREADS") == nullptr && config.workers.nproc_per_node > 1) {
    // As torchrun: set in ctrun's own environment so every worker inherits it.
    ::setenv("OMP_NUM_THREADS", "1", 1);
    log->warn(kOmpWarning);
  }
  // Before any thread exists (fork): kills the workers' process groups, grandchildren included, if ctrun dies; and
  // every process carrying this ctrun's job token (agent/process/escapees.hpp), set only after the guardian forked.
  const std::string job_token = make_job_token();
  if (!start_guardian(job_token))
    log->warn("could not start the orphan guardian; workers' children may outlive a killed ctrun");
  ::setenv(kJobTokenVariable, job_token.c_str(), 1);
  // Orphaned descendants of the workers (double-forked daemons, even with a cleared environment) become ctrun's
  // children, which the agent kills and reaps with their group.
  if (!become_subreaper()) log->warn("could not become the child subreaper of the workers (prctl); continuing");
  // From here on ctrun's own log lines go through a bounded queue: a stderr nobody reads never blocks the loop.
  const auto log_queue = make_queued_stderr_sink();
  ctrun::log::use_sink(log_queue.spdlog_sink);
  int code = 1;
  bool job_over = false;
  try {
    Agent agent(std::move(config), env);
    code = agent.run();
    job_over = true;  // the agent's destructor then stops the warm process; every attempt ended with its sweep
  } catch (const std::exception& e) {
    log->error("{}", e.what());
  }
  if (job_over) guardian_release();
  flush_queued_stderr(std::chrono::milliseconds(200));  // the agent flushed already; lines logged since
  return code;
}
