#include "agent/logs/tee_stream.hpp"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>

#include "agent/logs/console_sink.hpp"
#include "agent/logs/line_splitter.hpp"
#include "agent/logs/write_all.hpp"
#include "common/log.hpp"
#include "common/text.hpp"

namespace ctrun::agent {

class TeeStream::Impl : public std::enable_shared_from_this<Impl> {
 public:
  Impl(boost::asio::io_context& io, int fd, TeeTarget target, std::function<void()> on_eof)
      : pipe_(io, fd), target_(std::move(target)), on_eof_(std::move(on_eof)) {}

  ~Impl() {
    if (target_.file_fd >= 0) ::close(target_.file_fd);
  }

  void read() {
    pipe_.async_read_some(boost::asio::buffer(buf_), [self = shared_from_this()](auto ec, std::size_t n) {
      if (!ec) {
        // The file gets the bytes as they come; the console gets whole lines only.
        if (self->target_.file_fd >= 0 && !self->file_failed_) self->write_file(n);
        self->splitter_.feed(std::string_view(self->buf_.data(), n), [&](std::string_view line) { self->emit(line); });
        self->read();
        return;
      }
      self->splitter_.flush([&](std::string_view line) { self->emit(line); });
      self->finished_ = true;
      boost::system::error_code ignored;
      self->pipe_.close(ignored);
      if (self->target_.file_fd >= 0) {
        ::close(self->target_.file_fd);
        self->target_.file_fd = -1;
      }
      if (self->on_eof_) self->on_eof_();
    });
  }

  // A log file that cannot be written (disk full) is said once, with its path; the console still gets the lines.
  void write_file(std::size_t n) {
    if (int err = write_all_checked(target_.file_fd, buf_.data(), n); err != 0) {
      file_failed_ = true;
      ctrun::log::get("agent")->warn("cannot write worker output to {}: {}; the rest of this stream is not in the file",
                                     target_.file_path.empty() ? "a log file" : target_.file_path, std::strerror(err));
    }
  }

  void emit(std::string_view line) {
    if (target_.keep_last_line) remember(line);
    if (target_.console_fd >= 0 && target_.console != nullptr) {
      target_.console->write(target_.console_fd, target_.prefix, line);
    } else if (target_.console_fd >= 0) {
      line_.assign(target_.prefix);
      line_.append(line);
      write_all(target_.console_fd, line_.data(), line_.size());
    }
    if (target_.filtered_fd >= 0) {
      for (const auto& f : target_.filters) {
        if (line.find(f) != std::string_view::npos) {
          write_all(target_.filtered_fd, line.data(), line.size());
          break;
        }
      }
    }
  }

  void remember(std::string_view line) {
    const std::string_view text = text::trim(line);
    if (!text.empty()) last_line_.assign(text.substr(0, kKeptLineBytes));
  }

  static constexpr std::size_t kKeptLineBytes = 400;

  boost::asio::posix::stream_descriptor pipe_;
  TeeTarget target_;
  std::function<void()> on_eof_;
  std::array<char, 65536> buf_{};
  LineSplitter splitter_;
  std::string line_;
  std::string last_line_;
  bool finished_ = false;
  bool file_failed_ = false;
};

TeeStream::TeeStream(boost::asio::io_context& io, int read_fd, TeeTarget target, std::function<void()> on_eof)
    : impl_(std::make_shared<Impl>(io, read_fd, std::move(target), std::move(on_eof))) {}

TeeStream::~TeeStream() {
  boost::system::error_code ignored;
  impl_->pipe_.cancel(ignored);
}

void TeeStream::start() { impl_->read(); }
bool TeeStream::finished() const { return impl_->finished_; }
const std::string& TeeStream::last_line() const { return impl_->last_line_; }

}  // namespace ctrun::agent
