// A short, deterministic fuzz run inside `make test` (CI builds with gcc and has no libFuzzer): the same
// entry point as the libFuzzer target, fed twenty thousand inputs from a fixed-seed PRNG. Half are random
// bytes; half are valid request streams of both dialects with random mutations (bit flips, cuts, length
// fields replaced by huge values), which reach much deeper than pure noise; one in ten, streams of ctrun's tagged
// mode (tagged requests and reply frames).
#include <gtest/gtest.h>

#include <random>

#include "store/protocol.hpp"
#include "tests/store/fuzz/codec_fuzz.hpp"

namespace ctrun::store::fuzz {
namespace {

using namespace protocol;

std::string random_bytes(std::mt19937_64& rng, std::size_t n) {
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

Request random_request(std::mt19937_64& rng, Dialect d) {
  for (;;) {
    auto op = static_cast<std::uint8_t>(rng() % 19);
    auto cmd = command_of(d, op);
    if (!cmd) continue;
    Request r;
    r.command = *cmd;
    auto key = [&] { return "/k" + std::to_string(rng() % 4); };
    auto val = [&] { return rng() % 3 ? std::to_string(rng() % 100) : random_bytes(rng, rng() % 20); };
    r.u32 = rng() % 4 ? kValidationMagic : static_cast<std::uint32_t>(rng());
    r.integer = static_cast<std::int64_t>(rng() % 7) - 2;
    std::size_t n = rng() % 4;
    for (std::size_t i = 0; i < n + 1; ++i) r.keys.push_back(key());
    for (std::size_t i = 0; i < n + 2; ++i) r.values.push_back(val());
    if (r.command == Command::kMultiSet) r.values.resize(r.keys.size());
    return r;
  }
}

TEST(CodecFuzzSmoke, ThousandsOfDeterministicInputs) {
  std::mt19937_64 rng(20261121);
  int inputs = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string input;
    input.push_back(static_cast<char>(rng()));  // mode byte
    if (i % 2 == 0) {
      input += random_bytes(rng, rng() % 200);
    } else if (i % 10 == 3) {
      // ctrun's tagged mode: tagged requests, each followed by the frame of a reply (or bytes that are none).
      input[0] = static_cast<char>(0xA0 | (rng() & 0x0F));
      int n = static_cast<int>(rng() % 8) + 1;
      for (int k = 0; k < n; ++k) {
        const Request r = random_request(rng, Dialect::kV2);
        encode_tagged_request(rng() % 5, r, input);
        if (has_reply(r.command) && rng() % 2) {
          StringOut out{input};
          reply::frame(out, rng() % 5, rng() % 4 ? FrameStatus::kReply : FrameStatus::kRefused);
          input += random_bytes(rng, rng() % 24);
        }
      }
      if (rng() % 2) input[rng() % input.size()] ^= static_cast<char>(1u << (rng() % 8));
    } else {
      const Dialect d = (input[0] & 1) ? Dialect::kV2 : Dialect::kLegacy;
      if (d == Dialect::kV2) encode_request(d, Request{.command = Command::kValidate, .u32 = kValidationMagic}, input);
      int n = static_cast<int>(rng() % 12) + 1;
      for (int k = 0; k < n; ++k) encode_request(d, random_request(rng, d), input);
      switch (rng() % 4) {
        case 0:  // flip a few bits
          for (int f = 0; f < 3; ++f) input[rng() % input.size()] ^= static_cast<char>(1u << (rng() % 8));
          break;
        case 1:  // cut
          input.resize(rng() % input.size() + 1);
          break;
        case 2: {  // plant a huge little-endian length somewhere
          std::size_t at = rng() % input.size();
          std::string huge;
          put_u64(huge, rng() % 2 ? ~0ull : (1ull << (rng() % 64)));
          input.replace(at, std::min(huge.size(), input.size() - at), huge);
          break;
        }
        default:  // leave valid
          break;
      }
    }
    codec_fuzz_one(reinterpret_cast<const std::uint8_t*>(input.data()), input.size());
    ++inputs;
  }
  EXPECT_EQ(inputs, 20000);  // reaching here means no invariant trapped
}

}  // namespace
}  // namespace ctrun::store::fuzz
