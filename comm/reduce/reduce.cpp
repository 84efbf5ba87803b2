// The loops are written so GCC/Clang auto-vectorise them at -O3 (plain indexed loops over __restrict-free
// pointers that may alias only exactly, branch-free min/max). Half types convert to float32 per element.
#include "comm/reduce/reduce.hpp"

#include <algorithm>
#include <cstdint>
#include <string>

#include "comm/reduce/half.hpp"

namespace ctrun::comm::reduce {
namespace {

struct Sum {
  template <class T>
  static T apply(T a, T b) {
    return static_cast<T>(a + b);
  }
};
struct Prod {
  template <class T>
  static T apply(T a, T b) {
    return static_cast<T>(a * b);
  }
};
struct Min {
  template <class T>
  static T apply(T a, T b) {
    return b < a ? b : a;
  }
};
struct Max {
  template <class T>
  static T apply(T a, T b) {
    return a < b ? b : a;
  }
};
struct Band {
  template <class T>
  static T apply(T a, T b) {
    return static_cast<T>(a & b);
  }
};
struct Bor {
  template <class T>
  static T apply(T a, T b) {
    return static_cast<T>(a | b);
  }
};
struct Bxor {
  template <class T>
  static T apply(T a, T b) {
    return static_cast<T>(a ^ b);
  }
};

template <class Op, class T>
void loop(T* dst, const T* a, const T* b, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = Op::apply(a[i], b[i]);
}

template <class Op>
void loop(Float16* dst, const Float16* a, const Float16* b, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = to_float16(Op::apply(to_float(a[i]), to_float(b[i])));
}

template <class Op>
void loop(BFloat16* dst, const BFloat16* a, const BFloat16* b, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = to_bfloat16(Op::apply(to_float(a[i]), to_float(b[i])));
}

template <class T>
void dispatch_op(ReduceOp op, void* dst, const void* a, const void* b, std::size_t n) {
  auto* d = static_cast<T*>(dst);
  const auto* x = static_cast<const T*>(a);
  const auto* y = static_cast<const T*>(b);
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return loop<Sum>(d, x, y, n);
    case ReduceOp::kProduct:
      return loop<Prod>(d, x, y, n);
    case ReduceOp::kMin:
      return loop<Min>(d, x, y, n);
    case ReduceOp::kMax:
      return loop<Max>(d, x, y, n);
    case ReduceOp::kBand:
    case ReduceOp::kBor:
    case ReduceOp::kBxor:
      if constexpr (std::is_integral_v<T>) {
        if (op == ReduceOp::kBand) return loop<Band>(d, x, y, n);
        if (op == ReduceOp::kBor) return loop<Bor>(d, x, y, n);
        return loop<Bxor>(d, x, y, n);
      }
      break;
  }
  throw InvalidArgumentError("reduce op " + std::string(to_string(op)) + " is not defined for this dtype");
}

template <class T>
void divide_loop(T* d, std::size_t n, int divisor) {
  for (std::size_t i = 0; i < n; ++i) d[i] = static_cast<T>(d[i] / static_cast<T>(divisor));
}

}  // namespace

void reduce_to(DataType dtype, ReduceOp op, void* dst, const void* a, const void* b, std::size_t count) {
  if (count == 0) return;
  switch (dtype) {
    case DataType::kFloat32:
      return dispatch_op<float>(op, dst, a, b, count);
    case DataType::kFloat64:
      return dispatch_op<double>(op, dst, a, b, count);
    case DataType::kFloat16:
      return dispatch_op<Float16>(op, dst, a, b, count);
    case DataType::kBFloat16:
      return dispatch_op<BFloat16>(op, dst, a, b, count);
    case DataType::kInt8:
      return dispatch_op<std::int8_t>(op, dst, a, b, count);
    case DataType::kUInt8:
      return dispatch_op<std::uint8_t>(op, dst, a, b, count);
    case DataType::kInt32:
      return dispatch_op<std::int32_t>(op, dst, a, b, count);
    case DataType::kInt64:
      return dispatch_op<std::int64_t>(op, dst, a, b, count);
  }
  throw InvalidArgumentError("invalid dtype");
}

void reduce_into(DataType dtype, ReduceOp op, void* dst, const void* src, std::size_t count) {
  reduce_to(dtype, op, dst, dst, src, count);
}

void divide(DataType dtype, void* data, std::size_t n, int divisor) {
  switch (dtype) {
    case DataType::kFloat32:
      return divide_loop(static_cast<float*>(data), n, divisor);
    case DataType::kFloat64:
      return divide_loop(static_cast<double*>(data), n, divisor);
    case DataType::kInt8:
      return divide_loop(static_cast<std::int8_t*>(data), n, divisor);
    case DataType::kUInt8:
      return divide_loop(static_cast<std::uint8_t*>(data), n, divisor);
    case DataType::kInt32:
      return divide_loop(static_cast<std::int32_t*>(data), n, divisor);
    case DataType::kInt64:
      return divide_loop(static_cast<std::int64_t*>(data), n, divisor);
    case DataType::kFloat16: {
      auto* d = static_cast<Float16*>(data);
      for (std::size_t i = 0; i < n; ++i) d[i] = to_float16(to_float(d[i]) / static_cast<float>(divisor));
      return;
    }
    case DataType::kBFloat16: {
      auto* d = static_cast<BFloat16*>(data);
      for (std::size_t i = 0; i < n; ++i) d[i] = to_bfloat16(to_float(d[i]) / static_cast<float>(divisor));
      return;
    }
  }
}

}  // namespace ctrun::comm::reduce
