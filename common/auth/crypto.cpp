#include "common/auth/crypto.hpp"

#include <stdexcept>
#include <string>

#include "common/auth/crypto_module.hpp"
#include "common/module_loader.hpp"

namespace ctrun::auth {
namespace {

constexpr const char* kModuleFile = "libctrun_crypto.so";

const CryptoModule& module() {
  static const CryptoModule* opened = static_cast<const CryptoModule*>(modules::open_module(
      kModuleFile, "ctrun_crypto_module",
      [](const void* m) { return static_cast<const CryptoModule*>(m)->abi == kCryptoModuleAbi; },
      "a job secret and checkpoint digests need ctrun's crypto module (" + std::string(kModuleFile) +
          ", over OpenSSL's libcrypto), installed with ctrun; reinstall ctrun."));
  return *opened;
}

}  // namespace

void load_crypto() { (void)module(); }

Digest hmac_sha256(std::string_view key, std::string_view data) {
  Digest out{};
  if (!module().hmac_sha256(key.data(), key.size(), data.data(), data.size(), out.data()))
    throw std::runtime_error("HMAC-SHA256 failed in OpenSSL");
  return out;
}

Digest sha256(const void* data, std::size_t size) {
  Digest out{};
  if (!module().sha256(data, size, out.data())) throw std::runtime_error("SHA-256 failed in OpenSSL");
  return out;
}

std::string to_hex(const Digest& digest) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (auto b : digest) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

std::uint32_t crc32(const void* data, std::size_t size, std::uint32_t crc) { return module().crc32(crc, data, size); }

bool equal_digests(const Digest& a, const Digest& b) { return module().compare(a.data(), b.data(), a.size()) == 0; }

}  // namespace ctrun::auth
