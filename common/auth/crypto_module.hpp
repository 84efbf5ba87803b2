#pragma once
// What ctrun and its crypto module (libctrun_crypto.so, built from crypto_module.cpp) agree on. The module holds the
// calls into OpenSSL's libcrypto and zlib, so that only a job that needs them maps them: a job with a secret (the
// handshake's HMAC-SHA256, handshake.hpp) or one whose agents check replicated checkpoints (CRC-32 digests,
// agent/checkpoint/snapshot_digest.hpp).
// crypto.cpp opens it on first use. Plain C types cross the boundary; kCryptoModuleAbi changes whenever they do.

#include <cstddef>
#include <cstdint>

namespace ctrun::auth {

inline constexpr int kCryptoModuleAbi = 1;

struct CryptoModule {
  int abi;
  // HMAC-SHA256 of `data` under `key` into out[32]; false when OpenSSL failed.
  bool (*hmac_sha256)(const void* key, std::size_t key_size, const void* data, std::size_t size, std::uint8_t* out);
  // SHA-256 of `data` into out[32]; false when OpenSSL failed.
  bool (*sha256)(const void* data, std::size_t size, std::uint8_t* out);
  // Constant time: 0 when the two are equal.
  int (*compare)(const void* a, const void* b, std::size_t size);
  // zlib's CRC-32 of `data`, continuing `crc` (0 to start): the checkpoint digests' chunks.
  std::uint32_t (*crc32)(std::uint32_t crc, const void* data, std::size_t size);
};

}  // namespace ctrun::auth

// The module's one exported symbol.
extern "C" const ctrun::auth::CryptoModule* ctrun_crypto_module();
