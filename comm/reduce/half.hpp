#pragma once
// float16 / bfloat16 <-> float32 conversions. Reductions of half types run in float32 (one rounding per
// step, as NCCL and gloo do) so that sums of many ranks don't lose precision at every hop.

#include <bit>
#include <cstdint>

#include "comm/types.hpp"

namespace ctrun::comm::reduce {

inline float to_float(BFloat16 v) { return std::bit_cast<float>(static_cast<std::uint32_t>(v.bits) << 16); }

inline BFloat16 to_bfloat16(float f) {
  std::uint32_t u = std::bit_cast<std::uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return BFloat16{static_cast<std::uint16_t>((u >> 16) | 0x40)};  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return BFloat16{static_cast<std::uint16_t>(u >> 16)};
}

// GCC and Clang on x86-64/aarch64 provide _Float16 with exact IEEE conversions.
inline float to_float(Float16 v) { return static_cast<float>(std::bit_cast<_Float16>(v.bits)); }
inline Float16 to_float16(float f) { return Float16{std::bit_cast<std::uint16_t>(static_cast<_Float16>(f))}; }

}  // namespace ctrun::comm::reduce
