#pragma once
// Buffer: a non-owning view of the memory an op reads or writes (pointer, element count, dtype, device).
// Cheap to copy; the caller keeps the memory alive until the op's Work completes. Input-only buffers may be
// built from const data: comm never writes to a buffer the op only reads (send, the input of all_gather, ...).

#include <cstddef>
#include <span>
#include <vector>

#include "comm/types.hpp"

namespace ctrun::comm {

class Buffer {
 public:
  Buffer() = default;
  Buffer(void* data, std::size_t count, DataType dtype, Device device = Device::cpu())
      : data_(data), count_(count), dtype_(dtype), device_(device) {}
  Buffer(const void* data, std::size_t count, DataType dtype, Device device = Device::cpu())
      : Buffer(const_cast<void*>(data), count, dtype, device) {}

  template <Element T>
  Buffer(T* data, std::size_t count, Device device = Device::cpu())
      : Buffer(static_cast<const void*>(data), count, kDataTypeOf<T>, device) {}
  template <Element T>
  Buffer(std::vector<T>& v) : Buffer(v.data(), v.size()) {}  // NOLINT(google-explicit-constructor)
  template <Element T>
  Buffer(const std::vector<T>& v) : Buffer(v.data(), v.size()) {}  // NOLINT(google-explicit-constructor)
  template <Element T, std::size_t E>
  Buffer(std::span<T, E> s) : Buffer(s.data(), s.size()) {}  // NOLINT(google-explicit-constructor)

  void* data() const { return data_; }
  template <Element T>
  T* data_as() const {
    return static_cast<T*>(data_);
  }
  std::size_t count() const { return count_; }
  DataType dtype() const { return dtype_; }
  Device device() const { return device_; }
  std::size_t bytes() const { return count_ * element_size(dtype_); }
  bool empty() const { return count_ == 0; }
  bool is_cuda() const { return device_.is_cuda(); }

  // Elements [offset, offset + count) of this view; throws InvalidArgumentError when out of range.
  Buffer slice(std::size_t offset, std::size_t count) const;

  // Splits into `parts` equal consecutive views; throws InvalidArgumentError unless count() divides evenly.
  std::vector<Buffer> split(std::size_t parts) const;

 private:
  void* data_ = nullptr;
  std::size_t count_ = 0;
  DataType dtype_ = DataType::kUInt8;
  Device device_{};
};

}  // namespace ctrun::comm
