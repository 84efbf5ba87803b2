#pragma once
// The c10d::Work torch gets for each op, and the per-group thread that completes their futures.
// A part of ctrun_torch.cpp's one translation unit (see there), not a header to include elsewhere.

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "comm/torch/python_runtime.hpp"
#include "comm/torch/torch_types.hpp"

namespace ctrun::comm::torch_backend {
namespace {

// torch's tests and users match a collective's timeout by gloo's words (" Timed out ", torch's barrier-timeout
// tests): comm's TimeoutError keeps its message (which op, which peer) and gains them.
std::exception_ptr with_torch_timeout_words(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const TimeoutError& e) {
    return std::make_exception_ptr(std::runtime_error(std::string(e.what()) + "; Timed out after the group timeout"));
  } catch (...) {
    return error;
  }
}

// Work: one comm op plus what torch needs around it (outputs for the future, staging copies of non-contiguous
// tensors, post-processing such as unflattening). finalize() runs once, from whichever comes first: the caller's
// wait()/isCompleted() or the group's completion thread (which is what completes get_future() for DDP).
class CtrunWork final : public c10d::Work {
 public:
  CtrunWork(int rank, OpType type, TensorList outputs, std::chrono::milliseconds group_timeout)
      : c10d::Work(rank, type),
        group_timeout_(group_timeout),
        outputs_(std::move(outputs)),
        future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::ofTensors())) {}

  // A tensor comm should work on in place of `user`: `user` itself when contiguous, else a contiguous copy
  // (copy_in: with its data) that finalize() copies back into `user`.
  at::Tensor output(const at::Tensor& user, bool copy_in) {
    if (user.is_contiguous()) return user;
    at::Tensor staged = copy_in ? user.contiguous() : at::empty_like(user, at::MemoryFormat::Contiguous);
    copy_back_.emplace_back(user, staged);
    return staged;
  }
  at::Tensor input(const at::Tensor& user) {
    at::Tensor t = user.contiguous();
    keep_.push_back(t);
    return t;
  }
  void keep(at::Tensor t) { keep_.push_back(std::move(t)); }
  void then(std::function<void()> post) { post_ = std::move(post); }
  void start(WorkPtr inner) { inner_ = std::move(inner); }
  const WorkPtr& inner() const { return inner_; }

  bool isCompleted() override {
    if (inner_->is_completed()) finalize();
    std::lock_guard<std::mutex> lock(mutex_);
    return completed_;
  }
  bool isSuccess() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return completed_ && !exception_;
  }
  bool wait(std::chrono::milliseconds timeout) override {
    // torch's kNoTimeout (0) means "no per-call limit": the group's timeout, after which the op itself fails with
    // TimeoutError, so a dead peer never hangs the caller. Waited in slices, for Python's signal handlers.
    const auto limit = timeout.count() > 0 ? timeout : group_timeout_ + std::chrono::milliseconds(200);
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!inner_->is_completed()) {
      raise_pending_python_signal();
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      try {
        inner_->wait(std::clamp(left, std::chrono::milliseconds(1), kSignalSlice));
      } catch (const TimeoutError&) {
        if (inner_->is_completed()) break;
        if (left <= kSignalSlice)  // this call's own limit expired; the op goes on
          throw TimeoutError("Work::wait timed out after " + std::to_string(limit.count()) +
                             " ms; the op is still running (a peer may be stalled or calling a different op)");
      } catch (...) {
        break;  // the op failed: finalize() has its error
      }
    }
    raise_pending_python_signal();  // before the op's error: its traceback must print with no handler pending
    finalize();
    std::lock_guard<std::mutex> lock(mutex_);
    if (exception_) std::rethrow_exception(exception_);
    return true;
  }
  void synchronize() override {}
  // A receive's sender (Python's work._source_rank(), dist.recv's return value without src).
  int sourceRank() const override {
    const int source = inner_ ? inner_->source_rank() : -1;
    TORCH_CHECK(source >= 0, "ctrun backend: sourceRank() is only known for a completed receive");
    return source;
  }
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }
  void abort() override { TORCH_CHECK(false, "ctrun backend: Work.abort is not supported (destroy the group)"); }

  void finalize() {
    std::exception_ptr error;
    {
      std::lock_guard<std::mutex> lock(finalize_mutex_);
      if (finalized_) return;
      finalized_ = true;
      error = inner_->exception();
      if (error) error = with_torch_timeout_words(error);
      if (!error) {
        try {
          for (auto& [user, staged] : copy_back_) user.copy_(staged);
          if (post_) post_();
        } catch (...) {
          error = std::current_exception();
        }
      }
      copy_back_.clear();
      keep_.clear();
      post_ = nullptr;
      finish(error);
    }
    if (error) {
      future_->setError(error);
    } else {
      future_->markCompleted(c10::IValue(outputs_));
    }
  }

 private:
  std::chrono::milliseconds group_timeout_;
  TensorList outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  WorkPtr inner_;
  std::vector<std::pair<at::Tensor, at::Tensor>> copy_back_;
  TensorList keep_;
  std::function<void()> post_;
  std::mutex finalize_mutex_;
  bool finalized_ = false;
};

// Completes futures: ops of one group complete in issue order (collectives) or soon after (p2p, posted at once),
// so one thread waiting on them in order completes every future promptly. Its state is shared with the thread,
// which may outlive the group when the group's last reference goes in a future's callback on this very thread.
//
// Completing a future runs Python (its callbacks, e.g. DDP's fp16 hook decompressing), and so does dropping the
// last reference to a work (freeing those callbacks' closures and tensors' Python objects). Once Python finalizes,
// a thread that asks for the GIL is ended by pthread_exit, whose unwinding through these C++ frames ends the whole
// process in std::terminate. So before Python finalizes (at_python_exit, from an atexit hook) the completion in
// progress is let finish and every later one is skipped: the process is ending and no Python code waits any more.
struct Completer {
  std::mutex mutex;
  std::condition_variable cv;       // pending or stopping changed
  std::condition_variable idle_cv;  // completing became false
  std::deque<c10::intrusive_ptr<CtrunWork>> pending;
  bool stopping = false;
  bool python_exiting = false;
  bool completing = false;  // a future's completion, or the drop of its work, runs now

  void push(c10::intrusive_ptr<CtrunWork> w) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      pending.push_back(std::move(w));
    }
    cv.notify_one();
  }
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex);
      stopping = true;
    }
    cv.notify_all();
  }
  // With the GIL released: returns once no completion runs and none will start.
  void at_python_exit() {
    std::unique_lock<std::mutex> lock(mutex);
    python_exiting = true;
    idle_cv.wait(lock, [&] { return !completing; });
  }
  void loop() {
    for (;;) {
      c10::intrusive_ptr<CtrunWork> w;
      {
        std::unique_lock<std::mutex> lock(mutex);
        cv.wait(lock, [&] { return stopping || !pending.empty(); });
        if (pending.empty()) return;
        w = pending.front();
        pending.pop_front();
      }
      while (!w->inner()->is_completed()) {
        try {
          w->inner()->wait();
        } catch (...) {
        }
      }
      {
        std::lock_guard<std::mutex> lock(mutex);
        if (python_exiting) {
          (void)w.release();  // never freed: freeing may run Python, which is finalizing
          continue;
        }
        completing = true;
      }
      w->finalize();
      w.reset();
      {
        std::lock_guard<std::mutex> lock(mutex);
        completing = false;
      }
      idle_cv.notify_all();
    }
  }
};

// Every group's completer, so that one atexit hook can quiesce them all before Python finalizes.
struct Completers {
  std::mutex mutex;
  std::vector<std::weak_ptr<Completer>> live;
  bool python_exiting = false;

  static Completers& instance() {
    static auto* completers = new Completers;  // never destroyed: completion threads may outlive static teardown
    return *completers;
  }
  void add(const std::shared_ptr<Completer>& c) {
    std::lock_guard<std::mutex> lock(mutex);
    std::erase_if(live, [](const auto& w) { return w.expired(); });
    if (python_exiting) c->python_exiting = true;  // not yet shared with its thread
    live.push_back(c);
  }
  // The atexit hook, called with the GIL released.
  void at_python_exit() {
    std::vector<std::shared_ptr<Completer>> now;
    {
      std::lock_guard<std::mutex> lock(mutex);
      python_exiting = true;
      for (const auto& w : live) {
        if (auto c = w.lock()) now.push_back(std::move(c));
      }
    }
    for (const auto& c : now) c->at_python_exit();
  }
};

}  // namespace
}  // namespace ctrun::comm::torch_backend
