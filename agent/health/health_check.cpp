#include "agent/health/health_check.hpp"

#include <fcntl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <vector>

#include <fmt/format.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include "agent/base/signal_names.hpp"
#include "agent/process/worker_process.hpp"

extern char** environ;

namespace ctrun::agent {
namespace {

std::vector<std::string> own_environment() {
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) env.emplace_back(*e);
  return env;
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return fmt::format("exit {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("killed by {}", signal_name(WTERMSIG(status)));
  return fmt::format("status {}", status);
}

}  // namespace

struct HealthCheck::Impl : std::enable_shared_from_this<Impl> {
  Impl(boost::asio::io_context& io, std::string cmd, double timeout_s)
      : io(io), command(std::move(cmd)), timeout(timeout_s), output_pipe(io), exit_fd(io), timer(io) {}

  void run(Done d) {
    done = std::move(d);
    result = HealthResult{};
    began = std::chrono::steady_clock::now();
    output_open = exited = false;
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return fail_to_start(std::strerror(errno));
    SpawnRequest req;
    req.argv = {"/bin/sh", "-c", command};
    req.env = own_environment();
    req.stdout_fd = fds[1];
    req.stderr_fd = fds[1];
    try {
      StartedWorker started = start_worker(req);
      ::close(fds[1]);
      confirm_exec(started);  // /bin/sh: at once
      child = started.pid;
    } catch (const std::exception& e) {
      ::close(fds[0]);
      return fail_to_start(e.what());
    }
    const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, child, 0));
    if (pidfd < 0) {
      signal_group(child, SIGKILL);
      ::waitpid(child, nullptr, 0);  // killed: reaped at once
      child = -1;
      ::close(fds[0]);
      return fail_to_start(std::string("pidfd_open: ") + std::strerror(errno));
    }
    output_pipe.assign(fds[0]);
    exit_fd.assign(pidfd);
    output_open = true;
    read_output();
    wait_exit();
    timer.expires_after(
        std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(timeout)));
    timer.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (ec || self->child < 0) return;
      self->result.why = fmt::format("timed out after {} s (--health-check-timeout)", self->timeout);
      self->timed_out = true;
      signal_group(self->child, SIGKILL);
    });
  }

  void fail_to_start(const std::string& why) {
    result.why = "could not start: " + why;
    boost::asio::post(io, [self = shared_from_this()] { self->finish(); });
  }

  void read_output() {
    output_pipe.async_read_some(boost::asio::buffer(buffer),
                                [self = shared_from_this()](const boost::system::error_code& ec, std::size_t n) {
                                  if (n > 0) {
                                    self->result.output.append(self->buffer.data(), n);
                                    if (self->result.output.size() > kOutputKept)
                                      self->result.output.erase(0, self->result.output.size() - kOutputKept);
                                  }
                                  if (ec) {  // EOF (every holder of the pipe exited) or cancelled
                                    self->output_open = false;
                                    if (ec != boost::asio::error::operation_aborted) self->maybe_finish();
                                    return;
                                  }
                                  self->read_output();
                                });
  }

  void wait_exit() {
    exit_fd.async_wait(boost::asio::posix::stream_descriptor::wait_read,
                       [self = shared_from_this()](const boost::system::error_code& ec) {
                         if (ec || self->child < 0) return;
                         int status = 0;
                         if (::waitpid(self->child, &status, WNOHANG) != self->child) return self->wait_exit();
                         self->exited = true;
                         self->status = status;
                         // Whatever the command left running in its group goes with it: the pipe then ends too.
                         signal_group(self->child, SIGKILL);
                         self->child = -1;
                         if (self->output_open) self->grace_for_output();
                         self->maybe_finish();
                       });
  }

  // A process that left the command's group may hold the pipe open: its output is not waited for past a second.
  void grace_for_output() {
    timer.cancel();
    timer.expires_after(std::chrono::seconds(1));
    timer.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
      if (ec || !self->output_open) return;
      self->output_open = false;
      self->maybe_finish();
    });
  }

  // Both the exit and the end of the output: the output is whole before anybody reads it.
  void maybe_finish() {
    if (!exited || output_open) return;
    if (!timed_out) {
      result.passed = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      result.why = describe_status(status);
    }
    finish();
  }

  void finish() {
    timer.cancel();
    close_fds();
    result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
    timed_out = false;
    if (auto d = std::move(done)) {
      done = nullptr;
      d(result);
    }
  }

  void close_fds() {
    boost::system::error_code ignored;
    if (output_pipe.is_open()) output_pipe.close(ignored);
    if (exit_fd.is_open()) exit_fd.close(ignored);
  }

  void cancel() {
    done = nullptr;
    timer.cancel();
    if (child > 0) {
      signal_group(child, SIGKILL);
      ::waitpid(child, nullptr, 0);  // SIGKILLed: gone at once
      child = -1;
    }
    output_open = false;
    close_fds();
  }

  boost::asio::io_context& io;
  std::string command;
  double timeout;
  boost::asio::posix::stream_descriptor output_pipe;
  boost::asio::posix::stream_descriptor exit_fd;
  boost::asio::steady_timer timer;
  std::array<char, 4096> buffer{};
  Done done;
  HealthResult result;
  std::chrono::steady_clock::time_point began;
  pid_t child = -1;
  int status = 0;
  bool output_open = false;
  bool exited = false;
  bool timed_out = false;
};

HealthCheck::HealthCheck(boost::asio::io_context& io, std::string command, double timeout_seconds)
    : impl_(std::make_shared<Impl>(io, std::move(command), timeout_seconds)) {}

HealthCheck::~HealthCheck() { impl_->cancel(); }

void HealthCheck::run(Done done) { impl_->run(std::move(done)); }

void HealthCheck::cancel() { impl_->cancel(); }

pid_t HealthCheck::pid() const { return impl_->child; }

}  // namespace ctrun::agent
