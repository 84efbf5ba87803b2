#pragma once
// Shared by the comm examples: create the world group from the launcher's environment (ctrun/torchrun set
// RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), accept --backend cpu|nccl, and fail loudly on a wrong result.

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "comm/process_group.hpp"

namespace example {

inline std::shared_ptr<ctrun::comm::ProcessGroup> init(int argc, char** argv) {
  ctrun::comm::ProcessGroupOptions options;
  options.timeout = std::chrono::seconds(60);
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--backend") == 0) options.backend = argv[i + 1];
  }
  // The examples keep their data in host memory; with --backend nccl the nccl backend stages or rejects it.
  return ctrun::comm::ProcessGroup::init("env://", options);
}

// Exits the rank with status 1 (the launcher reports it) when a result is wrong.
#define EXAMPLE_CHECK(cond, ...)                                                     \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      std::fprintf(stderr, "CHECK FAILED (%s:%d): %s: ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                             \
      std::fprintf(stderr, "\n");                                                    \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)

}  // namespace example
