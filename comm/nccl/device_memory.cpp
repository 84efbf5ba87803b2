#include "comm/nccl/device_memory.hpp"

#include <string>
#include <utility>

#include "comm/nccl/cuda_check.hpp"

namespace ctrun::comm::nccl {

std::string cuda_unavailable_reason() {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();  // reset the last-error state so later calls report their own errors
    return std::string("cudaGetDeviceCount failed: ") + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) +
           "): no GPU or no NVIDIA driver on this machine";
  }
  if (count == 0) return "no CUDA device is visible (check CUDA_VISIBLE_DEVICES)";
  return {};
}

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

DeviceBuffer::DeviceBuffer(std::size_t bytes, int device) : bytes_(bytes), device_(device) {
  DeviceGuard guard(device);
  // cudaMalloc(0) returns a null pointer; allocate one byte so a zero-length view still has a device address.
  cuda_check(cudaMalloc(&data_, bytes == 0 ? 1 : bytes), "cudaMalloc(" + std::to_string(bytes) + " bytes)");
}

DeviceBuffer::~DeviceBuffer() {
  if (data_ != nullptr) cudaFree(data_);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(other.bytes_), device_(other.device_) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) cudaFree(data_);
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = other.bytes_;
    device_ = other.device_;
  }
  return *this;
}

void DeviceBuffer::upload(const void* host, std::size_t bytes, std::size_t offset) {
  if (offset + bytes > bytes_) throw InvalidArgumentError("DeviceBuffer::upload out of range");
  DeviceGuard guard(device_);
  cuda_check(cudaMemcpy(static_cast<char*>(data_) + offset, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
}

void DeviceBuffer::download(void* host, std::size_t bytes, std::size_t offset) const {
  if (offset + bytes > bytes_) throw InvalidArgumentError("DeviceBuffer::download out of range");
  DeviceGuard guard(device_);
  // cudaMemcpy on the legacy stream waits for work on blocking streams; comm's streams are non-blocking, so
  // callers sync the op first (Work::synchronize) as with any CUDA library.
  cuda_check(cudaMemcpy(host, static_cast<const char*>(data_) + offset, bytes, cudaMemcpyDeviceToHost),
             "cudaMemcpy D2H");
}

void DeviceBuffer::fill_zero() {
  DeviceGuard guard(device_);
  cuda_check(cudaMemset(data_, 0, bytes_), "cudaMemset");
}

Buffer DeviceBuffer::view(DataType dtype, std::size_t count) const {
  if (count * element_size(dtype) > bytes_) {
    throw InvalidArgumentError("DeviceBuffer of " + std::to_string(bytes_) + " bytes cannot hold " +
                               std::to_string(count) + " " + std::string(to_string(dtype)) + " elements");
  }
  return Buffer(data_, count, dtype, Device::cuda(device_));
}

}  // namespace ctrun::comm::nccl
