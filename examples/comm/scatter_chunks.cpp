// Scatter: rank 0 splits a vector into one chunk per rank; each rank transforms its chunk; gather brings the
// results back to rank 0, which checks the whole.
#include <vector>

#include "example_util.hpp"

int main(int argc, char** argv) {
  auto pg = example::init(argc, argv);
  const int rank = pg->rank();
  const std::size_t chunk = 5;
  const auto n = static_cast<std::size_t>(pg->size());
  std::vector<float> full(chunk * n);
  std::vector<ctrun::comm::Buffer> pieces;
  if (rank == 0) {
    for (std::size_t i = 0; i < full.size(); ++i) full[i] = static_cast<float>(i);
    pieces = ctrun::comm::Buffer(full).split(n);
  }
  std::vector<float> mine(chunk);
  pg->scatter(mine, pieces, 0);
  for (std::size_t i = 0; i < chunk; ++i) {
    EXAMPLE_CHECK(mine[i] == static_cast<float>(static_cast<std::size_t>(rank) * chunk + i), "rank %d chunk[%zu]=%f",
                  rank, i, mine[i]);
    mine[i] *= 10;
  }
  std::printf("rank %d: got chunk [%g .. %g]\n", rank, mine[0] / 10, mine[chunk - 1] / 10);
  pg->gather(pieces, mine, 0);
  if (rank == 0) {
    for (std::size_t i = 0; i < full.size(); ++i) {
      EXAMPLE_CHECK(full[i] == static_cast<float>(i) * 10, "gathered[%zu]=%f", i, full[i]);
    }
    std::printf("rank 0: gathered %zu transformed elements\n", full.size());
  }
  return 0;
}
