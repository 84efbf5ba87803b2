#include "comm/types.hpp"

namespace ctrun::comm {

std::size_t element_size(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat64:
    case DataType::kInt64:
      return 8;
    case DataType::kFloat32:
    case DataType::kInt32:
      return 4;
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return 2;
    case DataType::kInt8:
    case DataType::kUInt8:
      return 1;
  }
  throw InvalidArgumentError("invalid dtype code " + std::to_string(static_cast<int>(dtype)));
}

std::string_view to_string(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32:
      return "float32";
    case DataType::kFloat64:
      return "float64";
    case DataType::kFloat16:
      return "float16";
    case DataType::kBFloat16:
      return "bfloat16";
    case DataType::kInt8:
      return "int8";
    case DataType::kUInt8:
      return "uint8";
    case DataType::kInt32:
      return "int32";
    case DataType::kInt64:
      return "int64";
  }
  return "invalid";
}

bool is_floating_point(DataType dtype) {
  return dtype == DataType::kFloat32 || dtype == DataType::kFloat64 || dtype == DataType::kFloat16 ||
         dtype == DataType::kBFloat16;
}

std::string_view to_string(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kProduct:
      return "product";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kAvg:
      return "avg";
    case ReduceOp::kBand:
      return "band";
    case ReduceOp::kBor:
      return "bor";
    case ReduceOp::kBxor:
      return "bxor";
  }
  return "invalid";
}

bool is_bitwise(ReduceOp op) { return op == ReduceOp::kBand || op == ReduceOp::kBor || op == ReduceOp::kBxor; }

std::string to_string(Device device) {
  return device.is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(device.index);
}

}  // namespace ctrun::comm
