#pragma once
// Small helpers for programs that use comm with CUDA buffers (tests, benchmarks, examples): whether a GPU is
// usable here, and an owning device allocation with host<->device copies and a comm::Buffer view.

#include <cstddef>
#include <string>
#include <vector>

#include "comm/buffer.hpp"

namespace ctrun::comm::nccl {

// Empty when at least one CUDA device can be used; otherwise why not (e.g. "cudaGetDeviceCount failed:
// cudaErrorNoDevice ..."), for error messages and GTEST_SKIP.
std::string cuda_unavailable_reason();
// Number of usable CUDA devices (0 when none or no driver).
int cuda_device_count();

// cudaMalloc'd memory on one device, freed on destruction. Copies are synchronous (tests and setup code).
class DeviceBuffer {
 public:
  DeviceBuffer(std::size_t bytes, int device);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  std::size_t bytes() const { return bytes_; }
  int device() const { return device_; }

  void upload(const void* host, std::size_t bytes, std::size_t offset = 0);
  void download(void* host, std::size_t bytes, std::size_t offset = 0) const;
  void fill_zero();

  // A comm view of `count` elements of `dtype` (InvalidArgumentError if they do not fit).
  Buffer view(DataType dtype, std::size_t count) const;

  template <class T>
  static DeviceBuffer from(const std::vector<T>& host, int device) {
    DeviceBuffer b(host.size() * sizeof(T), device);
    b.upload(host.data(), host.size() * sizeof(T));
    return b;
  }
  template <class T>
  std::vector<T> to_vector(std::size_t count) const {
    std::vector<T> out(count);
    download(out.data(), count * sizeof(T));
    return out;
  }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  int device_ = 0;
};

}  // namespace ctrun::comm::nccl
