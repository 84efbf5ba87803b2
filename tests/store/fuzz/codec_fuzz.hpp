#pragma once
// One fuzz iteration over the TCPStore codec and the server's command semantics. Shared by the libFuzzer
// target (store_codec_fuzzer, `make fuzz`) and by a deterministic gtest that feeds it PRNG-made inputs in
// every `make test` run (CI has no libFuzzer run of its own). Aborts (__builtin_trap) on a broken invariant.

#include <cstddef>
#include <cstdint>

namespace ctrun::store::fuzz {

void codec_fuzz_one(const std::uint8_t* data, std::size_t size);

}  // namespace ctrun::store::fuzz
