#pragma once
// HMAC-SHA256, SHA-256 and CRC-32 through ctrun's crypto module (crypto_module.hpp), opened on first use: a program that
// never calls these never maps libcrypto.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ctrun::auth {

using Digest = std::array<std::uint8_t, 32>;

// Opens the module now (a job with a secret does it at start, so that a missing module is an error before anything
// runs). Throws std::runtime_error saying where it looked and what to do.
void load_crypto();

Digest hmac_sha256(std::string_view key, std::string_view data);
Digest sha256(const void* data, std::size_t size);
// zlib's CRC-32 (as Python's zlib.crc32): checkpoint digests. `crc`: the CRC so far, to continue it over more bytes.
std::uint32_t crc32(const void* data, std::size_t size, std::uint32_t crc = 0);
// Constant time (a MAC compared byte by byte would tell an attacker how many leading bytes it got right).
bool equal_digests(const Digest& a, const Digest& b);

// Lower-case hex of a digest (for messages and tests).
std::string to_hex(const Digest& digest);

}  // namespace ctrun::auth
