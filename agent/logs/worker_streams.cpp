#include "agent/logs/worker_streams.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "agent/logs/console_sink.hpp"
#include "agent/logs/line_splitter.hpp"
#include "agent/logs/log_layout.hpp"
#include "agent/logs/stream_plan.hpp"
#include "agent/logs/tee_stream.hpp"
#include "common/hostname.hpp"

namespace ctrun::agent {

int open_for_child(const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("cannot open " + path + ": " + std::strerror(errno));
  return fd;
}

WorkerStreams::WorkerStreams(boost::asio::io_context& io, const LaunchConfig& config, ConsoleSink& console,
                             std::optional<std::string> prefix_template, std::function<void()> on_eof)
    : io_(io),
      config_(config),
      console_(console),
      prefix_template_(std::move(prefix_template)),
      on_eof_(std::move(on_eof)) {}

WorkerStreams::~WorkerStreams() {
  for (int fd : {filtered_out_fd_, filtered_err_fd_}) {
    if (fd >= 0) ::close(fd);
  }
}

void WorkerStreams::begin_attempt(const LogLayout& layout, int restart_count) {
  layout_ = &layout;
  restart_count_ = restart_count;
  for (int* fd : {&filtered_out_fd_, &filtered_err_fd_}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
  if (!layout.enabled()) return;
  std::string dir = layout.attempt_dir(restart_count);
  if (!config_.duplicate_stdout_filters.empty()) filtered_out_fd_ = open_for_child(dir + "/filtered_stdout.log");
  if (!config_.duplicate_stderr_filters.empty()) filtered_err_fd_ = open_for_child(dir + "/filtered_stderr.log");
}

WorkerStreams::Fds WorkerStreams::open(int local_rank, int global_rank) {
  Fds fds;
  try {
    fds.out = open_stream(1, local_rank, global_rank, fds.to_close);
    fds.err = open_stream(2, local_rank, global_rank, fds.to_close);
  } catch (...) {
    for (int fd : fds.to_close) ::close(fd);
    throw;
  }
  return fds;
}

int WorkerStreams::open_stream(int stream, int local_rank, int global_rank, std::vector<int>& to_close) {
  StreamPlan plan = plan_stream(config_, local_rank, stream);
  std::string path =
      stream == 1 ? layout_->stdout_file(restart_count_, local_rank) : layout_->stderr_file(restart_count_, local_rank);
  switch (plan.mode) {
    case StreamMode::kInherit:
      return -1;
    case StreamMode::kNull:
    case StreamMode::kFile: {
      int fd = open_for_child(plan.mode == StreamMode::kFile && layout_->enabled() ? path : "/dev/null");
      to_close.push_back(fd);
      return fd;
    }
    case StreamMode::kTee: {
      TeeTarget target;
      target.file_fd = layout_->enabled() ? open_for_child(path) : -1;  // owned by the tee from here
      int p[2];
      if (::pipe2(p, O_CLOEXEC) != 0) {
        int err = errno;
        if (target.file_fd >= 0) ::close(target.file_fd);
        throw std::runtime_error(std::string("pipe2: ") + std::strerror(err));
      }
      to_close.push_back(p[1]);
      target.console_fd = plan.to_console ? stream : -1;
      target.console = &console_;
      target.file_path = path;
      target.filtered_fd = stream == 1 ? filtered_out_fd_ : filtered_err_fd_;
      target.filters = stream == 1 ? config_.duplicate_stdout_filters : config_.duplicate_stderr_filters;
      const std::string* tmpl = prefix_template_ ? &*prefix_template_ : nullptr;
      target.prefix = log_line_prefix(tmpl, config_.role, local_rank, global_rank, host::short_name());
      tees_.push_back(std::make_unique<TeeStream>(io_, p[0], std::move(target), on_eof_));
      tees_.back()->start();
      return p[1];
    }
  }
  return -1;
}

bool WorkerStreams::done() const {
  for (const auto& t : tees_) {
    if (!t->finished()) return false;
  }
  return true;
}

}  // namespace ctrun::agent
