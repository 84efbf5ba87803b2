// Broadcast a tensor from rank 0, then another from rank 1: every rank ends up with the root's data.
#include <vector>

#include "example_util.hpp"

int main(int argc, char** argv) {
  auto pg = example::init(argc, argv);
  const int rank = pg->rank();
  for (int root : {0, 1 % pg->size()}) {
    std::vector<float> t(1000, static_cast<float>(rank));
    if (rank == root) {
      for (std::size_t i = 0; i < t.size(); ++i) t[i] = static_cast<float>(100 * root + i);
    }
    pg->broadcast(t, root);
    for (std::size_t i = 0; i < t.size(); ++i) {
      EXAMPLE_CHECK(t[i] == static_cast<float>(100 * root + i), "rank %d element %zu is %f", rank, i, t[i]);
    }
    std::printf("rank %d: got broadcast from rank %d: [%g, %g, ...]\n", rank, root, t[0], t[1]);
  }
  return 0;
}
