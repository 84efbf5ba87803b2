#include "agent/logs/console_sink.hpp"

#include <unistd.h>

#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "agent/logs/write_all.hpp"

namespace ctrun::agent {

struct ConsoleSink::State {
  std::mutex mutex;
  std::condition_variable wake;     // the writer: something to write, or stop
  std::condition_variable drained;  // flush(): the queue became empty
  std::string pending[2];           // stdout, stderr: whole lines, in order
  std::size_t capacity = 0;
  std::uint64_t dropped = 0;
  std::string what_dropped;
  std::uint64_t reported = 0;  // dropped lines already named in a warning
  bool writing = false;        // the writer is inside write(2), lock released
  bool stop = false;
  std::thread writer;  // started by the first write(): a run that never writes to the console starts no thread

  void run() {
    std::unique_lock lock(mutex);
    for (;;) {
      wake.wait(lock, [&] { return stop || !pending[0].empty() || !pending[1].empty(); });
      if (pending[0].empty() && pending[1].empty()) break;  // stop, and nothing left
      for (int i = 0; i < 2; ++i) {
        if (pending[i].empty()) continue;
        std::string out;
        out.swap(pending[i]);
        writing = true;
        lock.unlock();
        write_all(i + 1, out.data(), out.size());
        lock.lock();
        writing = false;
      }
      if (pending[0].empty() && pending[1].empty() && dropped > reported) {
        std::string text =
            fmt::format("ctrun: warning: the console did not keep up: {} {}\n", dropped - reported, what_dropped);
        reported = dropped;
        writing = true;
        lock.unlock();
        write_all(2, text.data(), text.size());
        lock.lock();
        writing = false;
      }
      if (pending[0].empty() && pending[1].empty()) drained.notify_all();
    }
    drained.notify_all();
  }
};

ConsoleSink::ConsoleSink(std::size_t capacity, std::string what_dropped) : state_(std::make_shared<State>()) {
  state_->capacity = capacity;
  state_->what_dropped = std::move(what_dropped);
}

ConsoleSink::~ConsoleSink() {
  std::unique_lock lock(state_->mutex);
  state_->stop = true;
  const bool blocked = state_->writing;
  // What flush() could not write by now is lost with the process (a console that does not read).
  state_->pending[0].clear();
  state_->pending[1].clear();
  lock.unlock();
  state_->wake.notify_all();
  if (!state_->writer.joinable()) return;  // nothing was ever written
  if (blocked) {
    state_->writer.detach();
  } else {
    state_->writer.join();
  }
}

bool ConsoleSink::write(int fd, std::string_view prefix, std::string_view line) {
  const int i = fd == 2 ? 1 : 0;
  {
    std::lock_guard lock(state_->mutex);
    const std::size_t queued = state_->pending[0].size() + state_->pending[1].size();
    if (queued + prefix.size() + line.size() > state_->capacity) {
      ++state_->dropped;
      return false;
    }
    state_->pending[i].append(prefix);
    state_->pending[i].append(line);
    // The thread holds the state too: if it is left blocked in write() at exit, nothing it touches is freed.
    if (!state_->writer.joinable()) state_->writer = std::thread([s = state_] { s->run(); });
  }
  state_->wake.notify_one();
  return true;
}

bool ConsoleSink::flush(std::chrono::milliseconds budget) {
  std::unique_lock lock(state_->mutex);
  return state_->drained.wait_for(
      lock, budget, [&] { return state_->pending[0].empty() && state_->pending[1].empty() && !state_->writing; });
}

std::uint64_t ConsoleSink::dropped_lines() const {
  std::lock_guard lock(state_->mutex);
  return state_->dropped;
}

}  // namespace ctrun::agent
