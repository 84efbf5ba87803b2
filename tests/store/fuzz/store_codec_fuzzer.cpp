// libFuzzer entry for the TCPStore codec and command semantics (`make fuzz`; needs clang).
#include <cstddef>
#include <cstdint>

#include "tests/store/fuzz/codec_fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  ctrun::store::fuzz::codec_fuzz_one(data, size);
  return 0;
}
