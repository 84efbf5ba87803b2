#include "agent/logs/worker_streams.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <utility>

#include "agent/logs/console_sink.hpp"
#include "agent/logs/line_splitter.hpp"
#include "agent/logs/log_layout.hpp"
#include "agent/logs/stream_plan.hpp"
#include "agent/logs/tee_stream.hpp"
#include "common/hostname.hpp"
#include "common/text.hpp"

namespace ctrun::agent {
namespace {

// The last non-blank line of a log file's last 4 KiB (at most 400 bytes of it).
std::string last_line_of_file(const std::string& path) {
  constexpr std::streamoff kTail = 4096;
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return "";
  const std::streamoff size = in.tellg();
  in.seekg(size > kTail ? size - kTail : 0);
  const std::string tail(std::istreambuf_iterator<char>(in), {});
  for (std::string_view rest(tail); !rest.empty();) {
    const auto nl = rest.rfind('\n');
    const std::string_view line = text::trim(nl == std::string_view::npos ? rest : rest.substr(nl + 1));
    if (!line.empty()) return std::string(line.substr(0, 400));
    if (nl == std::string_view::npos) break;
    rest = rest.substr(0, nl);
  }
  return "";
}

}  // namespace

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
  answer_waiting();  // the previous attempt's
  stderr_.clear();
  for (int* fd : {&filtered_out_fd_, &filtered_err_fd_}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
  if (!layout.enabled()) return;
  std::string dir = layout.attempt_dir(restart_count);
  if (!config_.logs.duplicate_stdout_filters.empty()) filtered_out_fd_ = open_for_child(dir + "/filtered_stdout.log");
  if (!config_.logs.duplicate_stderr_filters.empty()) filtered_err_fd_ = open_for_child(dir + "/filtered_stderr.log");
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
      const bool file = plan.mode == StreamMode::kFile && layout_->enabled();
      int fd = open_for_child(file ? path : "/dev/null");
      to_close.push_back(fd);
      if (stream == 2 && file) stderr_[local_rank] = Stderr{false, 0, path};
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
      target.filters = stream == 1 ? config_.logs.duplicate_stdout_filters : config_.logs.duplicate_stderr_filters;
      const std::string* tmpl = prefix_template_ ? &*prefix_template_ : nullptr;
      target.prefix = log_line_prefix(tmpl, config_.workers.role, local_rank, global_rank, host::short_name());
      target.keep_last_line = stream == 2;
      const std::size_t index = tees_.size();
      if (stream == 2) stderr_[local_rank] = Stderr{true, index, ""};
      tees_.push_back(std::make_unique<TeeStream>(io_, p[0], std::move(target), [this, index] {
        tee_ended(index);
        if (on_eof_) on_eof_();
      }));
      tees_.back()->start();
      return p[1];
    }
  }
  return -1;
}

void WorkerStreams::last_stderr_line(int local_rank, LastLine then) {
  const auto it = stderr_.find(local_rank);
  if (it == stderr_.end()) return then("", false);
  const Stderr& err = it->second;
  if (!err.tee) return then(last_line_of_file(err.file), true);
  const TeeStream& tee = *tees_[err.tee_index];
  if (tee.finished()) return then(tee.last_line(), true);
  waiting_.emplace_back(err.tee_index, std::move(then));
}

void WorkerStreams::tee_ended(std::size_t index) {
  std::vector<LastLine> ready;
  std::erase_if(waiting_, [&](auto& w) {
    if (w.first != index) return false;
    ready.push_back(std::move(w.second));
    return true;
  });
  for (auto& then : ready) then(tees_[index]->last_line(), true);
}

void WorkerStreams::answer_waiting() {
  auto waiting = std::exchange(waiting_, {});
  for (auto& [index, then] : waiting) then(tees_[index]->last_line(), true);
}

bool WorkerStreams::done() const {
  for (const auto& t : tees_) {
    if (!t->finished()) return false;
  }
  return true;
}

}  // namespace ctrun::agent
