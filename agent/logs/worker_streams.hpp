#pragma once
// Where one attempt's worker streams go (agent/logs/stream_plan.hpp decides per rank and stream): the descriptors a
// worker gets for stdout and stderr (inherit, /dev/null, its log file, or a pipe read by a TeeStream on the agent's
// loop), and the attempt's filtered_std*.log files. Owns the tee streams, so it can tell when all output is written.

#include <functional>
#include <map>
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

  // The last line the worker of `local_rank` wrote to stderr in this attempt, handed to `then` once it is known,
  // with whether ctrun sees that stderr at all: at once when it went to a file (read back: the worker has exited) or
  // to the console or /dev/null ("", false); when ctrun tees it, once the stream ended (what the pipe still held is
  // read first) or at answer_waiting().
  using LastLine = std::function<void(const std::string& line, bool seen)>;
  void last_stderr_line(int local_rank, LastLine then);
  // Every request still waiting gets what was read so far (the bound of WorkerGroup::close on output in flight).
  void answer_waiting();

 private:
  int open_stream(int stream, int local_rank, int global_rank, std::vector<int>& to_close);
  void tee_ended(std::size_t index);

  // Where a rank's stderr goes in this attempt.
  struct Stderr {
    bool tee = false;
    std::size_t tee_index = 0;
    std::string file;  // redirected to this file ("": not a file)
  };

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
  std::map<int, Stderr> stderr_;                           // by local rank, this attempt
  std::vector<std::pair<std::size_t, LastLine>> waiting_;  // tee index, request
};

}  // namespace ctrun::agent
