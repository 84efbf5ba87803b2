// The name -> factory table of backends. Built-ins are registered on first use (not by static initialisers,
// which a static library's linker would drop).
#include <map>
#include <mutex>

#include "comm/backend.hpp"
#include "comm/cpu/cpu_backend.hpp"
#if defined(CTRUN_COMM_WITH_NCCL)
#include "comm/nccl/nccl_backend.hpp"
#endif

namespace ctrun::comm {
namespace {

struct Registry {
  std::mutex mutex;
  std::map<std::string, BackendFactory> factories;
};

Registry& registry() {
  static Registry* r = [] {
    auto* reg = new Registry;
    reg->factories["cpu"] = [](BackendContext ctx) { return cpu::make_cpu_backend(std::move(ctx)); };
#if defined(CTRUN_COMM_WITH_NCCL)
    // comm/nccl/nccl_backend.hpp declares ctrun::comm::nccl::make_nccl_backend(BackendContext).
    reg->factories["nccl"] = [](BackendContext ctx) { return nccl::make_nccl_backend(std::move(ctx)); };
    // CUDA builds: the cpu backend also takes CUDA buffers, staged through pinned host memory (comm/nccl/).
    reg->factories["cpu"] = [](BackendContext ctx) {
      return nccl::make_cuda_staging_backend(
          std::move(ctx), [](BackendContext host_ctx) { return cpu::make_cpu_backend(std::move(host_ctx)); });
    };
#endif
    return reg;
  }();
  return *r;
}

}  // namespace

void register_backend(const std::string& name, BackendFactory factory) {
  auto& reg = registry();
  std::lock_guard lock(reg.mutex);
  reg.factories[name] = std::move(factory);
}

bool has_backend(const std::string& name) {
  auto& reg = registry();
  std::lock_guard lock(reg.mutex);
  return reg.factories.count(name) != 0;
}

std::unique_ptr<Backend> create_backend(const std::string& name, BackendContext context) {
  BackendFactory factory;
  std::string known;
  {
    auto& reg = registry();
    std::lock_guard lock(reg.mutex);
    auto it = reg.factories.find(name);
    if (it != reg.factories.end()) factory = it->second;
    for (const auto& [n, f] : reg.factories) known += (known.empty() ? "" : ", ") + n;
  }
  if (!factory) {
    std::string hint = name == "nccl" ? " (nccl needs a build with CUDA and NCCL found: CTRUN_WITH_NCCL=AUTO/ON)" : "";
    throw UnsupportedError("unknown comm backend '" + name + "'" + hint + "; available: " + known);
  }
  return factory(std::move(context));
}

}  // namespace ctrun::comm
