#pragma once
// Element types, reduction operators, devices and the error classes of ctrun::comm. Shared by every backend
// (cpu, nccl), so nothing here knows about transports or CUDA.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

namespace ctrun::comm {

using Duration = std::chrono::milliseconds;

// torch.distributed's default process-group timeout (30 min); tests and users usually pass a smaller one.
inline constexpr Duration kDefaultTimeout = std::chrono::minutes(30);

enum class DataType : std::uint8_t { kFloat32, kFloat64, kFloat16, kBFloat16, kInt8, kUInt8, kInt32, kInt64 };
inline constexpr int kNumDataTypes = 8;

std::size_t element_size(DataType dtype);
std::string_view to_string(DataType dtype);  // "float32", "bfloat16", ... (torch's names)
bool is_floating_point(DataType dtype);

// AVG is SUM followed by a division by the group size (integers: truncating division, as NCCL's ncclAvg
// is float-only and torch rejects AVG on integer tensors with gloo; we allow it and document it).
// BAND/BOR/BXOR are accepted for integer dtypes only.
enum class ReduceOp : std::uint8_t { kSum, kProduct, kMin, kMax, kAvg, kBand, kBor, kBxor };
inline constexpr int kNumReduceOps = 8;

std::string_view to_string(ReduceOp op);
bool is_bitwise(ReduceOp op);

enum class DeviceType : std::uint8_t { kCpu, kCuda };

// Where a buffer's memory lives. CUDA buffers carry the device ordinal; the cpu backend stages them through
// host memory, the nccl backend uses them directly.
struct Device {
  DeviceType type = DeviceType::kCpu;
  int index = 0;

  static constexpr Device cpu() { return {}; }
  static constexpr Device cuda(int ordinal) { return {DeviceType::kCuda, ordinal}; }
  bool is_cpu() const { return type == DeviceType::kCpu; }
  bool is_cuda() const { return type == DeviceType::kCuda; }
  friend bool operator==(const Device&, const Device&) = default;
};
std::string to_string(Device device);  // "cpu", "cuda:1"

// IEEE half and bfloat16 as raw bits: storage types only. Reductions convert to float32 and back.
struct Float16 {
  std::uint16_t bits = 0;
};
struct BFloat16 {
  std::uint16_t bits = 0;
};

// Maps a C++ element type to its DataType (kDataTypeOf<float> == DataType::kFloat32).
template <class T>
struct DataTypeOf;
template <>
struct DataTypeOf<float> : std::integral_constant<DataType, DataType::kFloat32> {};
template <>
struct DataTypeOf<double> : std::integral_constant<DataType, DataType::kFloat64> {};
template <>
struct DataTypeOf<Float16> : std::integral_constant<DataType, DataType::kFloat16> {};
template <>
struct DataTypeOf<BFloat16> : std::integral_constant<DataType, DataType::kBFloat16> {};
template <>
struct DataTypeOf<std::int8_t> : std::integral_constant<DataType, DataType::kInt8> {};
template <>
struct DataTypeOf<std::uint8_t> : std::integral_constant<DataType, DataType::kUInt8> {};
template <>
struct DataTypeOf<char> : std::integral_constant<DataType, DataType::kUInt8> {};  // byte buffers (strings)
template <>
struct DataTypeOf<std::byte> : std::integral_constant<DataType, DataType::kUInt8> {};
template <>
struct DataTypeOf<std::int32_t> : std::integral_constant<DataType, DataType::kInt32> {};
template <>
struct DataTypeOf<std::int64_t> : std::integral_constant<DataType, DataType::kInt64> {};

template <class T>
inline constexpr DataType kDataTypeOf = DataTypeOf<std::remove_cv_t<T>>::value;

template <class T>
concept Element = requires {
  DataTypeOf<std::remove_cv_t<T>>::value;
};

// Every failure raised by comm derives from CommError.
class CommError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The caller passed something invalid: mismatched sizes or dtypes, a rank out of range, a bitwise op on floats.
// Raised before any communication, on the calling rank only.
class InvalidArgumentError : public CommError {
 public:
  using CommError::CommError;
};

// An op was called on a group (from new_group) that the calling rank is not a member of.
class NotMemberError : public InvalidArgumentError {
 public:
  using InvalidArgumentError::InvalidArgumentError;
};

// An op did not finish within its timeout (a stalled peer, or ranks calling different ops).
class TimeoutError : public CommError {
 public:
  using CommError::CommError;
};

// A peer broke the protocol or went away (connection closed, process died), or ranks called mismatched ops
// (a peer sent a different size than this rank expects). The group is unusable afterwards.
class PeerError : public CommError {
 public:
  using CommError::CommError;
};

// The backend cannot do this here (e.g. CUDA buffers without a CUDA build, nccl without a GPU).
class UnsupportedError : public CommError {
 public:
  using CommError::CommError;
};

}  // namespace ctrun::comm
