#pragma once
// Element-wise reduction kernels used by every algorithm of the cpu backend.

#include <cstddef>

#include "comm/types.hpp"

namespace ctrun::comm::reduce {

// dst[i] = dst[i] (op) src[i] for i < count. AVG reduces as SUM (the caller divides once at the end).
// Bitwise ops on floating-point dtypes throw InvalidArgumentError.
void reduce_into(DataType dtype, ReduceOp op, void* dst, const void* src, std::size_t count);

// dst[i] = a[i] (op) b[i]; dst may alias a or b. Saves a copy when the result goes to a third buffer.
void reduce_to(DataType dtype, ReduceOp op, void* dst, const void* a, const void* b, std::size_t count);

// data[i] /= divisor (AVG's final step); integers divide truncating.
void divide(DataType dtype, void* data, std::size_t count, int divisor);

}  // namespace ctrun::comm::reduce
