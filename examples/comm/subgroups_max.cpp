// Two sub-groups (first half and second half of the ranks) each all-reduce their ranks; then the MAX trick:
// every rank writes its group's sum into its half's slot (0 elsewhere) and a world all_reduce(MAX) gives every
// rank both sums.
#include <vector>

#include "example_util.hpp"

int main(int argc, char** argv) {
  auto pg = example::init(argc, argv);
  const int rank = pg->rank();
  const int n = pg->size();
  std::vector<int> first;
  std::vector<int> second;
  for (int r = 0; r < n; ++r) (r < n / 2 ? first : second).push_back(r);
  if (first.empty()) {  // a world of one: a single group
    first.push_back(0);
    second.clear();
  }
  // new_group is collective over the world: every rank creates both, in the same order.
  auto g1 = pg->new_group(first);
  auto g2 = second.empty() ? nullptr : pg->new_group(second);
  const bool in_first = g1->is_member();
  auto& mine = in_first ? *g1 : *g2;
  std::vector<std::int64_t> sum{rank};
  mine.all_reduce(sum);
  std::int64_t want1 = 0;
  std::int64_t want2 = 0;
  for (int r : first) want1 += r;
  for (int r : second) want2 += r;
  EXAMPLE_CHECK(sum[0] == (in_first ? want1 : want2), "rank %d group sum %lld", rank, static_cast<long long>(sum[0]));
  std::vector<std::int64_t> both{in_first ? sum[0] : 0, in_first ? 0 : sum[0]};
  pg->all_reduce(both, ctrun::comm::ReduceOp::kMax);
  EXAMPLE_CHECK(both[0] == want1 && both[1] == want2, "rank %d: both sums %lld %lld", rank,
                static_cast<long long>(both[0]), static_cast<long long>(both[1]));
  std::printf("rank %d (group %d): first-half sum %lld, second-half sum %lld\n", rank, in_first ? 1 : 2,
              static_cast<long long>(both[0]), static_cast<long long>(both[1]));
  return 0;
}
