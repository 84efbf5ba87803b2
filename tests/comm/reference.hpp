#pragma once
// Test data and a sequential reference for the collectives: element i of rank r's input is a small integer
// (exactly representable in every dtype, so sums are exact whatever the reduction order), and the reference
// folds ranks 0..n-1 one after another in double / int64.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "comm/buffer.hpp"
#include "comm/reduce/half.hpp"

namespace ctrun::comm::testing {

inline double value_of(int rank, std::size_t i, int seed, ReduceOp op, DataType dtype) {
  const auto k = static_cast<std::int64_t>(i);
  if (op == ReduceOp::kProduct) return 1 + (rank + k + seed) % 2;  // 2^8 stays exact in bfloat16 and int16+
  if (is_bitwise(op)) return static_cast<double>((rank * 37 + k * 11 + seed) & 0x7f);
  const double v = static_cast<double>((rank * 7 + k * 3 + seed) % 11);
  return dtype == DataType::kUInt8 ? v : v - 5;
}

// Typed storage for one buffer.
class TestBuffer {
 public:
  TestBuffer(DataType dtype, std::size_t count)
      : dtype_(dtype), count_(count), bytes_(count * element_size(dtype) + 1) {}

  Buffer view() { return Buffer(bytes_.data(), count_, dtype_); }
  Buffer slice(std::size_t off, std::size_t n) { return view().slice(off, n); }
  std::size_t count() const { return count_; }

  void set(std::size_t i, double v) {
    char* p = bytes_.data() + i * element_size(dtype_);
    switch (dtype_) {
      case DataType::kFloat32:
        store(p, static_cast<float>(v));
        break;
      case DataType::kFloat64:
        store(p, v);
        break;
      case DataType::kFloat16:
        store(p, reduce::to_float16(static_cast<float>(v)));
        break;
      case DataType::kBFloat16:
        store(p, reduce::to_bfloat16(static_cast<float>(v)));
        break;
      case DataType::kInt8:
        store(p, static_cast<std::int8_t>(static_cast<std::int64_t>(v)));
        break;
      case DataType::kUInt8:
        store(p, static_cast<std::uint8_t>(static_cast<std::int64_t>(v)));
        break;
      case DataType::kInt32:
        store(p, static_cast<std::int32_t>(static_cast<std::int64_t>(v)));
        break;
      case DataType::kInt64:
        store(p, static_cast<std::int64_t>(v));
        break;
    }
  }

  double get(std::size_t i) const {
    const char* p = bytes_.data() + i * element_size(dtype_);
    switch (dtype_) {
      case DataType::kFloat32:
        return load<float>(p);
      case DataType::kFloat64:
        return load<double>(p);
      case DataType::kFloat16:
        return reduce::to_float(load<Float16>(p));
      case DataType::kBFloat16:
        return reduce::to_float(load<BFloat16>(p));
      case DataType::kInt8:
        return load<std::int8_t>(p);
      case DataType::kUInt8:
        return load<std::uint8_t>(p);
      case DataType::kInt32:
        return load<std::int32_t>(p);
      case DataType::kInt64:
        return static_cast<double>(load<std::int64_t>(p));
    }
    return 0;
  }

  void fill(int rank, int seed, ReduceOp op, std::size_t offset = 0) {
    for (std::size_t i = 0; i < count_; ++i) set(i, value_of(rank, i + offset, seed, op, dtype_));
  }
  void fill_constant(double v) {
    for (std::size_t i = 0; i < count_; ++i) set(i, v);
  }

 private:
  template <class T>
  static void store(char* p, T v) {
    std::memcpy(p, &v, sizeof v);
  }
  template <class T>
  static T load(const char* p) {
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  DataType dtype_;
  std::size_t count_;
  std::vector<char> bytes_;  // +1 so that data() is never null, even for 0 elements
};

// acc (op) v, in the integer or floating type the reference folds in.
template <class T>
T fold(ReduceOp op, T acc, T v) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return acc + v;
    case ReduceOp::kProduct:
      return acc * v;
    case ReduceOp::kMin:
      return std::min(acc, v);
    case ReduceOp::kMax:
      return std::max(acc, v);
    case ReduceOp::kBand:
    case ReduceOp::kBor:
    case ReduceOp::kBxor:
      if constexpr (std::is_integral_v<T>) {
        return op == ReduceOp::kBand ? (acc & v) : op == ReduceOp::kBor ? (acc | v) : (acc ^ v);
      }
      break;
  }
  return acc;
}

// Reduction over ranks 0..n-1 of element i, as the collective must compute it: in int64 for integer dtypes, in
// double for floating ones.
template <class T>
double reference_fold(int n, std::size_t i, int seed, ReduceOp op, DataType dtype) {
  T acc = static_cast<T>(value_of(0, i, seed, op, dtype));
  for (int r = 1; r < n; ++r) acc = fold(op, acc, static_cast<T>(value_of(r, i, seed, op, dtype)));
  if (op == ReduceOp::kAvg) acc /= n;
  return static_cast<double>(acc);
}
inline double reference_reduce(int n, std::size_t i, int seed, ReduceOp op, DataType dtype) {
  return is_floating_point(dtype) ? reference_fold<double>(n, i, seed, op, dtype)
                                  : reference_fold<std::int64_t>(n, i, seed, op, dtype);
}

inline bool close_enough(double got, double want, DataType dtype) {
  const double tol = dtype == DataType::kFloat16 || dtype == DataType::kBFloat16 ? 1e-2 : 1e-6;
  return std::fabs(got - want) <= tol * std::max(1.0, std::fabs(want));
}

inline const std::vector<DataType>& all_dtypes() {
  static const std::vector<DataType> v = {DataType::kFloat32,  DataType::kFloat64, DataType::kFloat16,
                                          DataType::kBFloat16, DataType::kInt8,    DataType::kUInt8,
                                          DataType::kInt32,    DataType::kInt64};
  return v;
}

inline std::vector<ReduceOp> ops_for(DataType dtype) {
  std::vector<ReduceOp> ops = {ReduceOp::kSum, ReduceOp::kProduct, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kAvg};
  if (!is_floating_point(dtype)) {
    ops.insert(ops.end(), {ReduceOp::kBand, ReduceOp::kBor, ReduceOp::kBxor});
  }
  return ops;
}

}  // namespace ctrun::comm::testing
