#pragma once
// Page-locked host memory for staging CUDA buffers through host backends: cudaHostAlloc costs milliseconds, so
// blocks are cached by power-of-two size class and reused (up to a cap of cached bytes). Thread-safe.

#include <cstddef>
#include <map>
#include <mutex>

namespace ctrun::comm::nccl {

class PinnedPool;

// One borrowed block; returns to the pool when destroyed.
class PinnedBlock {
 public:
  PinnedBlock() = default;
  PinnedBlock(PinnedPool* pool, void* data, std::size_t capacity) : pool_(pool), data_(data), capacity_(capacity) {}
  ~PinnedBlock();
  PinnedBlock(PinnedBlock&& other) noexcept;
  PinnedBlock& operator=(PinnedBlock&& other) noexcept;
  PinnedBlock(const PinnedBlock&) = delete;
  PinnedBlock& operator=(const PinnedBlock&) = delete;

  void* data() const { return data_; }
  std::size_t capacity() const { return capacity_; }

 private:
  void reset();
  PinnedPool* pool_ = nullptr;
  void* data_ = nullptr;
  std::size_t capacity_ = 0;
};

class PinnedPool {
 public:
  // Process-wide pool (never destroyed: freeing pinned memory after the CUDA runtime shut down would fail).
  static PinnedPool& instance();

  explicit PinnedPool(std::size_t max_cached_bytes) : max_cached_(max_cached_bytes) {}
  PinnedBlock acquire(std::size_t bytes);
  void release(void* data, std::size_t capacity);
  std::size_t cached_bytes();

 private:
  std::mutex mutex_;
  std::multimap<std::size_t, void*> free_;  // capacity -> block
  std::size_t cached_ = 0;
  std::size_t max_cached_;
};

}  // namespace ctrun::comm::nccl
