// libctrun_crypto.so: OpenSSL's HMAC and SHA-256, zlib's CRC-32, for ctrun (crypto_module.hpp says why this is a module).
#include "common/auth/crypto_module.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <zlib.h>

namespace ctrun::auth {
namespace {

bool hmac_sha256(const void* key, std::size_t key_size, const void* data, std::size_t size, std::uint8_t* out) {
  unsigned int length = 0;
  return HMAC(EVP_sha256(), key, static_cast<int>(key_size), static_cast<const unsigned char*>(data), size, out,
              &length) != nullptr &&
         length == 32;
}

bool sha256(const void* data, std::size_t size, std::uint8_t* out) {
  unsigned int length = 0;
  return EVP_Digest(data, size, out, &length, EVP_sha256(), nullptr) == 1 && length == 32;
}

int compare(const void* a, const void* b, std::size_t size) { return CRYPTO_memcmp(a, b, size); }

std::uint32_t crc(std::uint32_t start, const void* data, std::size_t size) {
  return static_cast<std::uint32_t>(crc32_z(start, static_cast<const Bytef*>(data), size));
}

constexpr CryptoModule kModule{kCryptoModuleAbi, hmac_sha256, sha256, compare, crc};

}  // namespace
}  // namespace ctrun::auth

extern "C" __attribute__((visibility("default"))) const ctrun::auth::CryptoModule* ctrun_crypto_module() {
  return &ctrun::auth::kModule;
}
