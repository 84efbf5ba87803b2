// Links ctrun::comm_nccl but calls nothing of it: the library must still be loaded and register "nccl" by itself
// (tests/pkg/install_test.sh, CUDA builds). Needs no GPU: only the registry is asked.
#include <cstdio>

#include "comm/backend.hpp"

int main() {
  const bool registered = ctrun::comm::has_backend("nccl");
  std::printf("nccl registered: %s\n", registered ? "yes" : "no");
  return registered ? 0 : 1;
}
