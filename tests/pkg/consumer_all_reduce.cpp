// A worker as a user writes it against the installed ctrun (tests/pkg): env:// group, all_reduce, check.
// Built out of tree by consumer_cmake/ (find_package) and consumer_make/ (pkg-config), run under
// `ctrun --nproc-per-node=2`. Exits 1 with a message on a wrong sum.
#include <cstdio>
#include <vector>

// Both spellings of an installed header (issue 25): <ctrun/...> as libraries spell them, and the older "store/..."
// (-I<prefix>/include/ctrun), which keeps working.
#include <ctrun/comm/process_group.hpp>
#include "store/tcp_store.hpp"

int main() {
  auto pg = ctrun::comm::ProcessGroup::init("env://");
  std::vector<float> values(1000, static_cast<float>(pg->rank() + 1));
  pg->all_reduce(values);  // sum over ranks of (rank + 1)
  const float expected = static_cast<float>(pg->size() * (pg->size() + 1) / 2);
  for (float v : values) {
    if (v != expected) {
      std::fprintf(stderr, "rank %d: all_reduce gave %g, expected %g\n", pg->rank(), v, expected);
      return 1;
    }
  }
  std::printf("rank %d of %d: all_reduce ok (%g)\n", pg->rank(), pg->size(), expected);
  return 0;
}
