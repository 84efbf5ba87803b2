#include "common/auth/secret.hpp"

#include <sys/random.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace ctrun::auth {

Secret::Secret(std::string text, std::string source) : key_(std::move(text)), source_(std::move(source)) {
  while (!key_.empty() && (key_.back() == '\n' || key_.back() == '\r' || key_.back() == ' ' || key_.back() == '\t'))
    key_.pop_back();
  if (key_.size() < kMinSecretBytes)
    throw std::invalid_argument("the job secret from " + source_ + " is " + std::to_string(key_.size()) +
                                " bytes; it needs at least " + std::to_string(kMinSecretBytes) +
                                " (make one with `head -c 32 /dev/urandom | base64`)");
}

Secret Secret::from_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw std::invalid_argument("cannot read the job secret file '" + path + "': " + std::strerror(errno));
  // A secret is short: a file far longer is not one (and is not read whole into memory).
  constexpr std::size_t kMaxBytes = 4096;
  std::string buffer(kMaxBytes + 1, '\0');
  in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
  buffer.resize(static_cast<std::size_t>(in.gcount()));
  if (buffer.size() > kMaxBytes)
    throw std::invalid_argument("the job secret file '" + path + "' is longer than " + std::to_string(kMaxBytes) +
                                " bytes: is it the right file?");
  return Secret(std::move(buffer), "the secret file " + path);
}

std::shared_ptr<const Secret> secret_from(const std::string& file, const char* env_text) {
  if (!file.empty()) return std::make_shared<Secret>(Secret::from_file(file));
  if (env_text && *env_text) return std::make_shared<Secret>(env_text, std::string("$") + kSecretVariable);
  return nullptr;
}

void random_bytes(void* out, std::size_t size) {
  auto* at = static_cast<char*>(out);
  while (size > 0) {
    const ssize_t n = ::getrandom(at, size, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(std::string("getrandom: ") + std::strerror(errno));
    }
    at += n;
    size -= static_cast<std::size_t>(n);
  }
}

Secret Secret::generate(const std::string& source) {
  unsigned char bytes[32];
  random_bytes(bytes, sizeof bytes);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string text;
  for (unsigned char b : bytes) {
    text += kHex[b >> 4];
    text += kHex[b & 15];
  }
  return Secret(std::move(text), source);
}

std::string secret_file_warning(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || (st.st_mode & (S_IRGRP | S_IROTH)) == 0) return "";
  char mode[8];
  std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
  return "the job secret file " + path + " can be read by other users (mode " + mode + "): `chmod 600 " + path + "`";
}

}  // namespace ctrun::auth
