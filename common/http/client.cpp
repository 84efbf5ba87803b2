#include "common/http/client.hpp"

#include <memory>
#include <stdexcept>

#include <fmt/format.h>

#if CTRUN_WITH_METRICS
#include <curl/curl.h>
#endif

namespace ctrun::http {

#if CTRUN_WITH_METRICS

namespace {

constexpr std::size_t kMaxBody = 64 << 20;  // the live view of the largest job is far smaller

std::size_t append(char* data, std::size_t size, std::size_t count, void* out) {
  auto* body = static_cast<std::string*>(out);
  if (body->size() + size * count > kMaxBody) return 0;  // libcurl then fails the transfer
  body->append(data, size * count);
  return size * count;
}

}  // namespace

std::string get(const std::string& host, int port, const std::string& path, int timeout_ms) {
  static const CURLcode init = curl_global_init(CURL_GLOBAL_DEFAULT);  // once, thread-safe (a static)
  if (init != CURLE_OK) throw std::runtime_error("libcurl failed to initialise");
  const std::string where = fmt::format("{}:{}", host, port);
  const std::string url = fmt::format("http://{}{}", where, path);
  std::unique_ptr<CURL, void (*)(CURL*)> curl(curl_easy_init(), curl_easy_cleanup);
  if (!curl) throw std::runtime_error("libcurl: cannot make a request");
  std::string body;
  char error[CURL_ERROR_SIZE] = {};
  curl_easy_setopt(curl.get(), CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl.get(), CURLOPT_TIMEOUT_MS, static_cast<long>(timeout_ms));
  curl_easy_setopt(curl.get(), CURLOPT_NOSIGNAL, 1L);  // no SIGALRM for the name lookup's timeout
  curl_easy_setopt(curl.get(), CURLOPT_NOPROXY, "*");  // the job is reached directly, whatever http_proxy says
  curl_easy_setopt(curl.get(), CURLOPT_WRITEFUNCTION, append);
  curl_easy_setopt(curl.get(), CURLOPT_WRITEDATA, &body);
  curl_easy_setopt(curl.get(), CURLOPT_ERRORBUFFER, error);
  const CURLcode rc = curl_easy_perform(curl.get());
  if (rc != CURLE_OK) {
    throw std::runtime_error(fmt::format("GET {} failed: {}", url, error[0] != '\0' ? error : curl_easy_strerror(rc)));
  }
  long status = 0;
  curl_easy_getinfo(curl.get(), CURLINFO_RESPONSE_CODE, &status);
  if (status != 200) {
    throw std::runtime_error(
        fmt::format("{} answered {} to GET {}: {}", where, status, path, body.substr(0, body.find('\n'))));
  }
  return body;
}

#else

std::string get(const std::string& host, int port, const std::string& path, int) {
  throw std::runtime_error(
      fmt::format("cannot GET http://{}:{}{}: this build has no HTTP client (configured with -DCTRUN_WITH_METRICS=OFF)",
                  host, port, path));
}

#endif

}  // namespace ctrun::http
