#include "agent/logs/log_sink.hpp"

#include <mutex>
#include <string_view>

#include <spdlog/sinks/base_sink.h>

namespace ctrun::agent {
namespace {

class QueueSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit QueueSink(std::shared_ptr<ConsoleSink> queue) : queue_(std::move(queue)) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t formatted;
    formatter_->format(msg, formatted);
    queue_->write(2, {}, std::string_view(formatted.data(), formatted.size()));  // never blocks
  }
  void flush_() override {}  // the queue's writer thread writes as soon as it can

 private:
  std::shared_ptr<ConsoleSink> queue_;
};

std::mutex g_mutex;
std::weak_ptr<ConsoleSink> g_last;

}  // namespace

void flush_queued_stderr(std::chrono::milliseconds budget) {
  std::shared_ptr<ConsoleSink> queue;
  {
    std::lock_guard lock(g_mutex);
    queue = g_last.lock();
  }
  if (queue) queue->flush(budget);
}

QueuedStderrSink make_queued_stderr_sink(std::size_t capacity) {
  auto queue = std::make_shared<ConsoleSink>(capacity, "line(s) of ctrun's own log were dropped");
  {
    std::lock_guard lock(g_mutex);
    g_last = queue;
  }
  auto sink = std::make_shared<QueueSink>(queue);
  sink->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%n] [%l] %v");
  return {queue, sink};
}

}  // namespace ctrun::agent
