#pragma once
// Where a c10d handler's background work runs: its heartbeats, its loss and round watches, the steps of a join
// (tasks that may block on a store round trip, never on a WAIT: waits are Store::wait_async), and the timers that
// schedule them. An agent's handler makes a runner of one thread; a process that simulates thousands of agents
// (rdzv_bench) gives all its handlers one runner of a few threads, so that no agent needs a thread of its own.

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace ctrun::rdzv {

class Runner {
 public:
  explicit Runner(int threads = 1);
  ~Runner();  // stops: pending tasks and timers are dropped; running ones finish first
  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;

  // A timer started by after(): cancel() keeps its task from running if it has not started.
  class Timer {
   public:
    virtual ~Timer() = default;
    virtual void cancel() = 0;
  };

  void post(std::function<void()> task);
  std::shared_ptr<Timer> after(std::chrono::steady_clock::duration delay, std::function<void()> task);
  bool on_runner_thread() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::vector<std::thread> threads_;
};

// Keeps the tasks and callbacks of one owner (a handler) from running once it is gone, on a runner or a store's
// I/O thread it does not own: wrap() each one; close() (from the owner's destructor, never from a wrapped task)
// waits for those already running, and those that come later do nothing.
class TaskScope {
 public:
  TaskScope();
  ~TaskScope();  // close()
  template <class Fn>
  auto wrap(Fn fn) {
    return [state = state_, fn = std::move(fn)](auto&&... args) mutable {
      if (!state->enter()) return;
      struct Leave {
        State* s;
        ~Leave() { s->leave(); }
      } leave{state.get()};
      fn(std::forward<decltype(args)>(args)...);
    };
  }
  void close();

 private:
  struct State {
    std::mutex mutex;
    std::condition_variable idle;
    bool open = true;
    int running = 0;
    bool enter();
    void leave();
  };
  std::shared_ptr<State> state_;
};

}  // namespace ctrun::rdzv
