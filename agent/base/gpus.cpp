#include "agent/base/gpus.hpp"
#include "common/text.hpp"

#include <algorithm>
#include <charconv>
#include <filesystem>

namespace ctrun::agent {

int apply_cuda_visible_devices(int physical, const std::optional<std::string>& cvd) {
  if (!cvd) return physical;
  int count = 0;
  size_t start = 0;
  const std::string& s = *cvd;
  if (s.empty()) return 0;
  while (start <= s.size()) {
    size_t end = s.find(',', start);
    std::string item = s.substr(start, end == std::string::npos ? std::string::npos : end - start);
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    if (item.rfind("GPU-", 0) == 0 || item.rfind("MIG-", 0) == 0) {
      ++count;  // a UUID: cannot be checked without the driver library; CUDA accepts known ones
    } else {
      const auto idx = text::parse_int<int>(item);
      // CUDA stops at the first entry that is not a valid device ordinal.
      if (!idx || *idx < 0 || *idx >= physical) break;
      ++count;
    }
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return std::min(count, physical);
}

int named_gpu_count(const std::optional<std::string>& cvd) {
  if (!cvd || text::trim(*cvd).empty()) return 0;
  return static_cast<int>(text::split(*cvd, ',').size());
}

int visible_gpu_count(const EnvLookup& env, const std::string& proc_gpus_dir) {
  int physical = 0;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(proc_gpus_dir, ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++physical;
  }
  return apply_cuda_visible_devices(physical, env("CUDA_VISIBLE_DEVICES"));
}

}  // namespace ctrun::agent
