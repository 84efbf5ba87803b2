#include "agent/preload/job_wide_env.hpp"

#include <array>
#include <map>

namespace ctrun::agent::preload {
namespace {

constexpr std::array<std::string_view, 17> kPrefixes = {"PYTHON",
                                                        "LD_",
                                                        "MALLOC_",
                                                        "OMP_",
                                                        "KMP_",
                                                        "GOMP_",
                                                        "MKL_",
                                                        "OPENBLAS_",
                                                        "GOTO",
                                                        "BLIS_",
                                                        "VECLIB_",
                                                        "NUMEXPR_",
                                                        "TORCH_",
                                                        "PYTORCH_",
                                                        "CUDA_VISIBLE_DEVICES",
                                                        "HIP_VISIBLE_DEVICES",
                                                        "ROCR_VISIBLE_DEVICES"};
constexpr std::array<std::string_view, 4> kNames = {"GLIBC_TUNABLES", "CUDA_DEVICE_ORDER", "CUDA_MODULE_LOADING",
                                                    "NVIDIA_VISIBLE_DEVICES"};

// The job-wide variables of an environment, by name.
std::map<std::string_view, std::string_view> job_wide_values(const std::vector<std::string>& env) {
  std::map<std::string_view, std::string_view> out;
  for (const auto& entry : env) {
    const auto eq = entry.find('=');
    if (eq == std::string::npos) continue;
    std::string_view name(entry.data(), eq);
    if (is_job_wide_variable(name)) out[name] = std::string_view(entry).substr(eq + 1);
  }
  return out;
}

}  // namespace

bool is_job_wide_variable(std::string_view name) {
  // torch's NCCL Flight Recorder settings (agent/launch/worker_invocation.cpp sets them per rank) are read when a
  // ProcessGroupNCCL is made, after the fork: not at import.
  for (auto n : {"TORCH_NCCL_TRACE_BUFFER_SIZE", "TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_DUMP_ON_TIMEOUT",
                 "TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "TORCH_FR_DUMP_TEMP_FILE"}) {
    if (name == n) return false;
  }
  for (auto p : kPrefixes) {
    if (name.starts_with(p)) return true;
  }
  for (auto n : kNames) {
    if (name == n) return true;
  }
  return false;
}

std::optional<std::string> job_wide_difference(const std::vector<std::string>& warm,
                                               const std::vector<std::string>& worker) {
  const auto a = job_wide_values(warm);
  const auto b = job_wide_values(worker);
  auto describe = [](std::string_view name, const std::string_view* x, const std::string_view* y) {
    auto value = [](const std::string_view* v) {
      std::string out = v ? "'" : "unset";
      if (v) out.append(*v).push_back('\'');
      return out;
    };
    return std::string(name) + " (warm process: " + value(x) + ", this rank: " + value(y) + ")";
  };
  for (const auto& [name, value] : a) {
    auto it = b.find(name);
    if (it == b.end()) return describe(name, &value, nullptr);
    if (it->second != value) return describe(name, &value, &it->second);
  }
  for (const auto& [name, value] : b) {
    if (!a.contains(name)) return describe(name, nullptr, &value);
  }
  return std::nullopt;
}

}  // namespace ctrun::agent::preload
