#include "common/hostname.hpp"

#include <netdb.h>
#include <unistd.h>

#include <cstring>

namespace ctrun::host {

std::string name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return {};
  return buf;
}

std::string short_name() {
  std::string n = name();
  return n.substr(0, n.find('.'));
}

std::string fqdn() {
  std::string out = name();
  if (out.empty()) return "localhost";
  addrinfo hints{};
  hints.ai_flags = AI_CANONNAME;
  addrinfo* info = nullptr;
  if (::getaddrinfo(out.c_str(), nullptr, &hints, &info) == 0 && info != nullptr) {
    if (info->ai_canonname != nullptr && std::strchr(info->ai_canonname, '.') != nullptr) out = info->ai_canonname;
    ::freeaddrinfo(info);
  }
  return out;
}

}  // namespace ctrun::host
