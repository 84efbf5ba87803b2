#include "agent/logs/stream_plan.hpp"

#include <algorithm>

namespace ctrun::agent {

bool rank_on_console(const LaunchConfig& c, int local_rank) {
  return c.logs.local_ranks_filter.empty() ||
         std::find(c.logs.local_ranks_filter.begin(), c.logs.local_ranks_filter.end(), local_rank) !=
             c.logs.local_ranks_filter.end();
}

StreamPlan plan_stream(const LaunchConfig& c, int local_rank, int stream) {
  bool tee = stream == 1 ? c.logs.tee.out(local_rank) : c.logs.tee.err(local_rank);
  bool redirect = stream == 1 ? c.logs.redirects.out(local_rank) : c.logs.redirects.err(local_rank);
  bool console = rank_on_console(c, local_rank);
  StreamPlan plan;
  if (tee) {
    plan.mode = StreamMode::kTee;
    plan.to_console = console;
  } else if (redirect) {
    plan.mode = StreamMode::kFile;
    plan.to_console = false;
  } else {
    plan.mode = console ? StreamMode::kInherit : StreamMode::kNull;
    plan.to_console = console;
  }
  return plan;
}

}  // namespace ctrun::agent
