// Failure test program (run by comm_launch --no-kill): every rank loops over all_reduce; rank 2 exits in the
// middle of the loop. Every other rank must get an error from the collective within 10 s (exit 0 then), never
// hang (the launcher's timeout) and never complete (exit 1).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <vector>

#include "comm/process_group.hpp"

int main() {
  ctrun::comm::ProcessGroupOptions options;
  options.timeout = std::chrono::seconds(30);  // far above the bound checked below: detection must not wait for it
  auto pg = ctrun::comm::ProcessGroup::init("env://", options);
  std::vector<float> v(1 << 16, 1.0f);
  const auto start = std::chrono::steady_clock::now();
  try {
    for (int i = 0; i < 1000000; ++i) {
      if (pg->rank() == 2 && i == 20) _exit(3);
      pg->all_reduce(v);
    }
  } catch (const ctrun::comm::CommError& e) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("rank %d raised after %.2f s: %s\n", pg->rank(), s, e.what());
    return s < 10 ? 0 : 1;
  }
  std::printf("rank %d: the collective never failed\n", pg->rank());
  return 1;
}
