#include "comm/nccl/pinned_pool.hpp"

#include <algorithm>
#include <bit>
#include <string>
#include <utility>

#include "comm/nccl/cuda_check.hpp"

namespace ctrun::comm::nccl {
namespace {
constexpr std::size_t kMinBlock = 64 * 1024;
constexpr std::size_t kDefaultMaxCached = std::size_t{512} << 20;
}  // namespace

PinnedBlock::~PinnedBlock() { reset(); }

PinnedBlock::PinnedBlock(PinnedBlock&& other) noexcept
    : pool_(std::exchange(other.pool_, nullptr)),
      data_(std::exchange(other.data_, nullptr)),
      capacity_(std::exchange(other.capacity_, 0)) {}

PinnedBlock& PinnedBlock::operator=(PinnedBlock&& other) noexcept {
  if (this != &other) {
    reset();
    pool_ = std::exchange(other.pool_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    capacity_ = std::exchange(other.capacity_, 0);
  }
  return *this;
}

void PinnedBlock::reset() {
  if (pool_ != nullptr && data_ != nullptr) pool_->release(data_, capacity_);
  pool_ = nullptr;
  data_ = nullptr;
}

PinnedPool& PinnedPool::instance() {
  static auto* pool = new PinnedPool(kDefaultMaxCached);
  return *pool;
}

PinnedBlock PinnedPool::acquire(std::size_t bytes) {
  const std::size_t capacity = std::bit_ceil(std::max(bytes, kMinBlock));
  {
    std::lock_guard lock(mutex_);
    if (auto it = free_.find(capacity); it != free_.end()) {
      void* data = it->second;
      free_.erase(it);
      cached_ -= capacity;
      return PinnedBlock(this, data, capacity);
    }
  }
  void* data = nullptr;
  // Portable: the block may be used with any device (ranks of one process on different GPUs).
  cuda_check(cudaHostAlloc(&data, capacity, cudaHostAllocPortable),
             "cudaHostAlloc(" + std::to_string(capacity) + " bytes of pinned staging memory)");
  return PinnedBlock(this, data, capacity);
}

void PinnedPool::release(void* data, std::size_t capacity) {
  {
    std::lock_guard lock(mutex_);
    if (cached_ + capacity <= max_cached_) {
      free_.emplace(capacity, data);
      cached_ += capacity;
      return;
    }
  }
  cudaFreeHost(data);
}

std::size_t PinnedPool::cached_bytes() {
  std::lock_guard lock(mutex_);
  return cached_;
}

}  // namespace ctrun::comm::nccl
