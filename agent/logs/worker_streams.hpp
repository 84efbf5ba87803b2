#pragma once
// Where one attempt's worker streams go (agent/logs/stream_plan.hpp decides per rank and stream): the descriptors a
// worker gets for stdout and stderr (inherit, /dev/null, its log file, or a pipe read by a TeeStream on the agent's
// loop), and the attempt's filtered_std*.log files. Owns the tee streams, so it can tell when all output is written.

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/base/launch_config.hpp"

namespace boost::asio {
class io_context;
}

namespace ctrun::agent {

class ConsoleSink;
class LogLayout;
class TeeStream;

// Opens a file for a worker to write (created, truncated, CLOEXEC). Throws std::runtime_error with the path.
int open_for_child(const std::string& path);

class WorkerStreams {
 public:
  // on_eof: a tee'd stream ended and everything of it was written (called on the loop).
  WorkerStreams(boost::asio::io_context& io, const LaunchConfig& config, ConsoleSink& console,
                std::optional<std::string> prefix_template, std::function<void()> on_eof);
  ~WorkerStreams();
  WorkerStreams(const WorkerStreams&) = delete;
  WorkerStreams& operator=(const WorkerStreams&) = delete;

  // A new attempt (attempt_<restart_count>/ of layout): opens its filtered_std*.log files.
  void begin_attempt(const LogLayout& layout, int restart_count);

  // The stdout and stderr a worker gets (-1: ctrun's own). The caller closes `to_close` once the worker has them.
  struct Fds {
    int out = -1;
    int err = -1;
    std::vector<int> to_close;
  };
  Fds open(int local_rank, int global_rank);

  // Every tee'd stream ended and was written.
  bool done() const;

 private:
  int open_stream(int stream, int local_rank, int global_rank, std::vector<int>& to_close);

  boost::asio::io_context& io_;
  const LaunchConfig& config_;
  ConsoleSink& console_;
  std::optional<std::string> prefix_template_;
  std::function<void()> on_eof_;
  const LogLayout* layout_ = nullptr;
  int restart_count_ = 0;
  int filtered_out_fd_ = -1;
  int filtered_err_fd_ = -1;
  std::vector<std::unique_ptr<TeeStream>> tees_;
};

}  // namespace ctrun::agent
