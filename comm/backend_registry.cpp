// The name -> factory table of backends. "cpu" is registered on first use (not by a static initialiser, which a
// static library's linker would drop). The CUDA backends live in ctrun_comm_nccl, which registers "nccl" and
// wraps "cpu" when a program linking it starts (comm/nccl/register.cpp), so this library never needs CUDA.
#include <map>
#include <mutex>

#include "comm/backend.hpp"
#include "comm/cpu/cpu_backend.hpp"
#include "common/text.hpp"

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

BackendFactory backend_factory(const std::string& name) {
  auto& reg = registry();
  std::lock_guard lock(reg.mutex);
  auto it = reg.factories.find(name);
  return it == reg.factories.end() ? BackendFactory{} : it->second;
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
    known = text::join_with(reg.factories, ", ", [](const auto& entry) { return entry.first; });
  }
  if (!factory) {
    std::string hint = name == "nccl"
                           ? " (nccl: link ctrun::comm_nccl / libctrun_comm_nccl, built when CUDA and NCCL are found: "
                             "CTRUN_WITH_NCCL=AUTO/ON)"
                           : "";
    throw UnsupportedError("unknown comm backend '" + name + "'" + hint + "; available: " + known);
  }
  return factory(std::move(context));
}

}  // namespace ctrun::comm
