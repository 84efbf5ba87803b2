#pragma once
// ctrun's own log lines (spdlog) on stderr through a ConsoleSink: queued (bounded, 1 MiB) and written by a thread of
// their own, so a stderr nobody reads never blocks the agent's event loop; lines that do not fit are dropped and
// counted (one warning once stderr catches up), as --tee's console lines are.
//
//   auto sink = agent::make_queued_stderr_sink();
//   ctrun::log::use_sink(sink.spdlog_sink);   // every logger, existing and future
//   ... at the end: sink.queue->flush(budget)

#include <chrono>
#include <memory>

#include <spdlog/sinks/sink.h>

#include "agent/logs/console_sink.hpp"

namespace ctrun::agent {

struct QueuedStderrSink {
  std::shared_ptr<ConsoleSink> queue;
  std::shared_ptr<spdlog::sinks::sink> spdlog_sink;
};

QueuedStderrSink make_queued_stderr_sink(std::size_t capacity = 1u << 20);

// Waits up to budget for the last queue made by make_queued_stderr_sink() to be written (before _exit). No-op
// without one.
void flush_queued_stderr(std::chrono::milliseconds budget);

}  // namespace ctrun::agent
