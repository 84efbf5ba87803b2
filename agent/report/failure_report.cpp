#include "agent/report/failure_report.hpp"

#include <unistd.h>

#include <csignal>

#include <nlohmann/json.hpp>

#include "agent/base/event_log.hpp"
#include "agent/launch/worker_invocation.hpp"
#include "agent/logs/write_all.hpp"
#include "agent/report/error_file.hpp"
#include "agent/report/failure.hpp"
#include "agent/report/missing_torch.hpp"
#include "common/hostname.hpp"
#include "common/log.hpp"

namespace ctrun::agent {

std::optional<int> report_worker_failures(const std::vector<Worker>& workers, const LaunchConfig& config,
                                          const EnvLookup& env, EventLog& events,
                                          const std::vector<std::string>& stragglers,
                                          const std::optional<std::string>& resume,
                                          const std::vector<std::string>& stepped_out) {
  auto log = ctrun::log::get("agent");
  std::vector<WorkerFailure> failures;
  std::vector<std::string> stderr_logs;  // beside failures
  for (const auto& w : workers) {
    if (w.exitcode == 0) continue;
    // Workers that exited after ctrun began stopping the group are collateral, not failures (torchrun
    // lists only those that had failed when it noticed the first) - unless they recorded an error.
    if (w.stopped_by_us && !read_worker_error_file(w.error_file)) continue;
    failures.push_back(
        make_failure(w.local_rank, w.global_rank, w.pid, w.exitcode, w.error_file, w.exited_epoch, w.exited_ns));
    if (!w.failure_note.empty()) failures.back().message = w.failure_note;
    stderr_logs.push_back(w.stderr_log);
  }
  if (failures.empty()) return std::nullopt;
  std::string summary = format_failure_summary(entrypoint_name(config), failures, host::fqdn());
  std::string text = "ctrun: error: ChildFailedError: " + summary + "\n";
  write_all(STDERR_FILENO, text.data(), text.size());
  // A write error is the one cause ctrun can see from outside: SIGPIPE (or a shell's 141) means the worker
  // wrote to a pipe or socket whose reader had gone (EPIPE). EIO/ENOSPC surface as the worker's own exception
  // (its error file, with @record) - ctrun cannot tell them from other failures.
  for (const auto& f : failures) {
    if (f.exitcode == -SIGPIPE || f.exitcode == 128 + SIGPIPE)
      log->error(
          "local_rank {} (rank {}) died on a write error: SIGPIPE, it wrote to a pipe or socket whose reader had "
          "gone (EPIPE)",
          f.local_rank, f.global_rank);
  }
  for (const auto& line : stragglers) log->error("straggler (last report): {}", line);
  for (const auto& line : stepped_out) log->error("excluded during the job: {}", line);
  for (const auto& w : workers) {
    if (w.stuck_state != 0)
      log->error("node unhealthy: local_rank {} (pid {}) survived SIGKILL, state {}; ctrun did not wait for it",
                 w.local_rank, w.pid, process_state_words(w.stuck_state));
  }
  if (resume) log->error("checkpoint: {}", *resume);
  const WorkerFailure& root = failures[root_cause_index(failures)];
  if (root.error_file == "<N/A>") {
    log->info(
        "local_rank {} FAILED with no error file. Decorate your entrypoint fn with @record for traceback "
        "info. See: https://pytorch.org/docs/stable/elastic/errors.html",
        root.local_rank);
  }
  if (auto hint = missing_torch_hint(failures, stderr_logs, config, env)) log->error("{}", *hint);
  if (auto own = env("TORCHELASTIC_ERROR_FILE"); own && !own->empty()) {
    write_agent_error_file(*own, root.error_file, root.exitcode, summary);
  }
  events.emit(Event::kFailed, {{"rank", root.global_rank}, {"exitcode", root.exitcode}, {"summary", summary}});
  if (!config.propagate_exit_code) return 1;
  return root.exitcode < 0 ? 128 - root.exitcode : root.exitcode;
}

}  // namespace ctrun::agent
