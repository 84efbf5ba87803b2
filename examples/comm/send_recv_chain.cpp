// A send/recv chain 0 -> 1 -> 2 -> ...: every rank after the first receives, doubles the data and passes it on.
#include <vector>

#include "example_util.hpp"

int main(int argc, char** argv) {
  auto pg = example::init(argc, argv);
  const int rank = pg->rank();
  const int n = pg->size();
  std::vector<double> data{1, 2, 3, 4};
  if (rank > 0) {
    pg->recv(data, rank - 1);
    for (auto& x : data) x *= 2;
  }
  if (rank + 1 < n) pg->send(data, rank + 1);
  const double factor = static_cast<double>(1 << rank);
  for (std::size_t i = 0; i < data.size(); ++i) {
    EXAMPLE_CHECK(data[i] == static_cast<double>(i + 1) * factor, "rank %d element %zu is %g", rank, i, data[i]);
  }
  std::printf("rank %d: [%g, %g, %g, %g]\n", rank, data[0], data[1], data[2], data[3]);
  return 0;
}
