// Non-blocking point to point: rank 0 isends a buffer to every other rank and keeps computing while the
// transfers are in flight; the receivers irecv and also compute before waiting.
#include <cmath>
#include <vector>

#include "example_util.hpp"

namespace {
// Stand-in for useful work overlapping communication.
double busy_work(int rounds) {
  double acc = 0;
  for (int i = 1; i <= rounds; ++i) acc += std::sqrt(static_cast<double>(i));
  return acc;
}
}  // namespace

int main(int argc, char** argv) {
  auto pg = example::init(argc, argv);
  const int rank = pg->rank();
  std::vector<std::int32_t> data(1 << 16);
  if (rank == 0) {
    for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::int32_t>(i * 3);
    std::vector<ctrun::comm::WorkPtr> works;
    for (int r = 1; r < pg->size(); ++r) works.push_back(pg->isend(data, r, /*tag=*/r));
    const double w = busy_work(200000);
    for (auto& work : works) work->wait();
    std::printf("rank 0: sent to %d ranks while computing %.1f\n", pg->size() - 1, w);
    return 0;
  }
  auto work = pg->irecv(data, 0, /*tag=*/rank);
  const double w = busy_work(200000);
  const bool early = work->is_completed();
  work->wait();
  for (std::size_t i = 0; i < data.size(); i += 997) {
    EXAMPLE_CHECK(data[i] == static_cast<std::int32_t>(i * 3), "rank %d element %zu is %d", rank, i, data[i]);
  }
  std::printf("rank %d: received %zu ints (done before wait: %s), computed %.1f meanwhile\n", rank, data.size(),
              early ? "yes" : "no", w);
  return 0;
}
