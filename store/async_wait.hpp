#pragma once
// Waiting for keys without a thread of the caller's: the store's own asynchronous WAIT where it has one
// (Store::wait_async: MuxStore), else a thread that waits in short slices (MemoryStore, FileStore, EtcdStore,
// TcpStore) so that a cancel is honoured within one slice.

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "store/store.hpp"

namespace ctrun::store {

// Starts waiting for `keys` on `store` (kept alive until the wait ends). `done` runs exactly once (see AsyncWait).
std::shared_ptr<AsyncWait> wait_async(const std::shared_ptr<Store>& store, const std::vector<std::string>& keys,
                                      WaitDone done, Duration slice = std::chrono::milliseconds(200));

// An AsyncWait that delivers `done` exactly once, whoever gets there first (the waiter or cancel()). For
// implementations: finish() returns false when the outcome was delivered already.
class OnceWait : public AsyncWait {
 public:
  explicit OnceWait(WaitDone done) : done_(std::move(done)) {}
  void cancel() override { finish(WaitOutcome::kCancelled, {}); }
  bool finish(WaitOutcome outcome, const std::string& error);
  bool finished() const;

 private:
  mutable std::mutex mutex_;
  WaitDone done_;  // empty once delivered
};

}  // namespace ctrun::store
