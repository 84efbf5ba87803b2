#pragma once
// Tensors <-> comm buffers: dtypes, the tensors comm can take, reduce ops, and flattening lists of tensors.
// A part of ctrun_torch.cpp's one translation unit (see there), not a header to include elsewhere.

#include "comm/torch/torch_types.hpp"

namespace ctrun::comm::torch_backend {
namespace {

DataType dtype_of(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat:
      return DataType::kFloat32;
    case at::kDouble:
      return DataType::kFloat64;
    case at::kHalf:
      return DataType::kFloat16;
    case at::kBFloat16:
      return DataType::kBFloat16;
    case at::kChar:
      return DataType::kInt8;
    case at::kByte:
      return DataType::kUInt8;
    case at::kBool:
      return DataType::kUInt8;  // 0/1 bytes; reductions remapped in reduce_op_for()
    case at::kInt:
      return DataType::kInt32;
    case at::kLong:
      return DataType::kInt64;
    default:
      TORCH_CHECK(false, "ctrun backend: unsupported dtype ", t.scalar_type(),
                  " (supported: float32/64, float16, bfloat16, int8, uint8, int32, int64, bool)");
  }
}

void check_tensor(const at::Tensor& t, const char* op) {
  TORCH_CHECK(t.defined(), "ctrun backend: ", op, ": undefined tensor");
  TORCH_CHECK(t.layout() == at::kStrided, "ctrun backend: ", op, ": only dense (strided) tensors are supported");
  TORCH_CHECK(t.device().is_cpu(), "ctrun backend: ", op, ": tensor on ", t.device(),
              " but backend \"ctrun\" takes CPU tensors (use \"cpu:ctrun,cuda:nccl\" on torch 2.x, or .cpu())");
}

Buffer buffer_of(const at::Tensor& contiguous) {
  return Buffer(contiguous.data_ptr(), static_cast<std::size_t>(contiguous.numel()), dtype_of(contiguous));
}

comm::ReduceOp reduce_op_for(const c10d::ReduceOp& op, const at::Tensor& t) {
  const bool is_bool = t.scalar_type() == at::kBool;
  switch (static_cast<c10d::ReduceOp::RedOpType>(op)) {
    case c10d::ReduceOp::SUM:
      return is_bool ? comm::ReduceOp::kMax : comm::ReduceOp::kSum;  // logical or
    case c10d::ReduceOp::PRODUCT:
      return is_bool ? comm::ReduceOp::kMin : comm::ReduceOp::kProduct;  // and
    case c10d::ReduceOp::MIN:
      return comm::ReduceOp::kMin;
    case c10d::ReduceOp::MAX:
      return comm::ReduceOp::kMax;
    case c10d::ReduceOp::AVG:
      TORCH_CHECK(!is_bool, "ctrun backend: ReduceOp.AVG is not defined for bool tensors");
      return comm::ReduceOp::kAvg;
    case c10d::ReduceOp::BAND:
      return comm::ReduceOp::kBand;
    case c10d::ReduceOp::BOR:
      return comm::ReduceOp::kBor;
    case c10d::ReduceOp::BXOR:
      return comm::ReduceOp::kBxor;
    default:
      TORCH_CHECK(false, "ctrun backend: unsupported reduce op (PREMUL_SUM is NCCL-only)");
  }
}

at::Tensor flatten(const TensorList& tensors) {
  TensorList flat;
  for (const auto& t : tensors) flat.push_back(t.reshape({-1}));
  return at::cat(flat);
}

void unflatten_into(const at::Tensor& flat, TensorList& tensors) {
  int64_t offset = 0;
  for (auto& t : tensors) {
    t.copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
}

}  // namespace
}  // namespace ctrun::comm::torch_backend
