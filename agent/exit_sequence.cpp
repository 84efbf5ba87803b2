#include "agent/exit_sequence.hpp"

#include <unistd.h>

#include <cstdio>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "agent/base/event_log.hpp"
#include "agent/base/helper_lane.hpp"
#include "agent/logs/console_sink.hpp"
#include "agent/logs/log_sink.hpp"
#include "common/log.hpp"

namespace ctrun::agent {

void end_output_or_exit(ConsoleSink& console, EventLog& events, HelperLane& lane, bool signalled, int exit_code,
                        std::chrono::milliseconds leave_budget) {
  auto log = ctrun::log::get("agent");
  // Tee'd lines still queued for a slow console get a moment; a console that does not read gets none.
  const std::chrono::milliseconds budget(lane.busy() || signalled ? 200 : 2000);
  console.flush(budget);
  flush_queued_stderr(budget);  // ctrun's own lines (agent/logs/log_sink.hpp), same budget
  if (auto dropped = console.dropped_lines()) {
    log->warn(
        "{} line(s) of worker output were not shown on the console (it did not keep up); the log files have every "
        "line",
        dropped);
    events.emit(Event::kConsoleDropped, {{"lines", dropped}});
  }
  events.emit(Event::kShutdown, {{"exit_code", exit_code}});
  // The round the helper was joining or held when a signal came is left first, within the leave budget.
  const bool abandon_pending = lane.abandon_pending();
  if (abandon_pending)
    log->warn("the rendezvous did not answer within {} ms; leaving without it", leave_budget.count());
  if (!lane.busy() && !abandon_pending) return;
  // A rendezvous, barrier or store call is still blocked on the helper thread and the agent was told to go: it does
  // not wait for it.
  spdlog::apply_all([](const std::shared_ptr<spdlog::logger>& l) { l->flush(); });
  flush_queued_stderr(std::chrono::milliseconds(200));
  std::fflush(nullptr);
  ::_exit(exit_code);
}

}  // namespace ctrun::agent
