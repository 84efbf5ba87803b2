#pragma once
// The console side of --tee: worker lines bound for ctrun's stdout/stderr are queued here and written by a thread
// of their own, so a console nobody reads (a full pipe, a stopped terminal) never blocks the agent's event loop.
// The thread starts with the first line: a run that shows no worker output on the console starts none.
// The queue is bounded (capacity bytes, both streams together); a line that does not fit is dropped and counted,
// and once the console catches up one warning on stderr says how many lines it missed. The log files (--log-dir)
// are written on the loop and never drop anything.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace ctrun::agent {

class ConsoleSink {
 public:
  static constexpr std::size_t kDefaultCapacity = 8u << 20;

  // what_dropped ends the catch-up warning: "...: N <what_dropped>".
  explicit ConsoleSink(std::size_t capacity = kDefaultCapacity,
                       std::string what_dropped =
                           "line(s) of worker output were not shown (the log files under --log-dir have every line)");
  // Waits for the writer only if it is not blocked in a write(); otherwise leaves it behind (the process is ending).
  ~ConsoleSink();
  ConsoleSink(const ConsoleSink&) = delete;
  ConsoleSink& operator=(const ConsoleSink&) = delete;

  // Queues prefix+line for fd (1 or 2). Never blocks on the console; false when the line was dropped.
  bool write(int fd, std::string_view prefix, std::string_view line);
  // Waits up to budget for everything queued to be written. True when drained.
  bool flush(std::chrono::milliseconds budget);
  std::uint64_t dropped_lines() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace ctrun::agent
