#include "store/async_wait.hpp"

#include <thread>

namespace ctrun::store {

bool OnceWait::finish(WaitOutcome outcome, const std::string& error) {
  WaitDone done;
  {
    std::lock_guard lock(mutex_);
    if (!done_) return false;
    done = std::move(done_);
    done_ = nullptr;
  }
  done(outcome, error);
  return true;
}

bool OnceWait::finished() const {
  std::lock_guard lock(mutex_);
  return !done_;
}

std::shared_ptr<AsyncWait> wait_async(const std::shared_ptr<Store>& store, const std::vector<std::string>& keys,
                                      WaitDone done, Duration slice) {
  auto once = std::make_shared<OnceWait>(std::move(done));
  auto native =
      store->wait_async(keys, [once](WaitOutcome outcome, const std::string& error) { once->finish(outcome, error); });
  if (native) {
    // The caller cancels the native wait through `once`'s owner below: both must go.
    struct Both final : AsyncWait {
      std::shared_ptr<OnceWait> once;
      std::shared_ptr<AsyncWait> native;
      void cancel() override {
        native->cancel();
        once->cancel();
      }
    };
    auto both = std::make_shared<Both>();
    both->once = once;
    both->native = std::move(native);
    return both;
  }
  // Detached: a store's blocking wait cannot be interrupted, so the thread ends at the end of its slice after a
  // cancel (its outcome then goes nowhere); it holds the store until then.
  std::thread([store, keys, once, slice] {
    while (!once->finished()) {
      try {
        store->wait(keys, slice);
        once->finish(WaitOutcome::kReady, {});
      } catch (const TimeoutError&) {
        // the slice passed: look at the cancel flag and wait again
      } catch (const std::exception& e) {
        once->finish(WaitOutcome::kFailed, e.what());
      }
    }
  }).detach();
  return once;
}

}  // namespace ctrun::store
