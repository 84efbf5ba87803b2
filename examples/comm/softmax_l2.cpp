// Distributed softmax and L2 normalisation of a vector split across ranks, through all_reduce:
// softmax needs the global max (MAX) and the global sum of exponentials (SUM); L2 needs the global sum of squares.
// Each rank checks its slice against the same computation done on the whole vector locally.
#include <algorithm>
#include <cmath>
#include <vector>

#include "example_util.hpp"

namespace {
double element(std::size_t i) { return std::sin(0.37 * static_cast<double>(i)) * 5.0; }
}  // namespace

int main(int argc, char** argv) {
  auto pg = example::init(argc, argv);
  const int rank = pg->rank();
  const std::size_t per_rank = 1000;
  const std::size_t total = per_rank * static_cast<std::size_t>(pg->size());
  std::vector<double> x(per_rank);
  for (std::size_t i = 0; i < per_rank; ++i) x[i] = element(static_cast<std::size_t>(rank) * per_rank + i);

  std::vector<double> m{*std::max_element(x.begin(), x.end())};
  pg->all_reduce(m, ctrun::comm::ReduceOp::kMax);
  std::vector<double> s{0};
  for (double v : x) s[0] += std::exp(v - m[0]);
  pg->all_reduce(s);
  std::vector<double> sq{0};
  for (double v : x) sq[0] += v * v;
  pg->all_reduce(sq);

  // Reference: the whole vector on one rank.
  double ref_max = -1e300;
  double ref_sum = 0;
  double ref_sq = 0;
  for (std::size_t i = 0; i < total; ++i) ref_max = std::max(ref_max, element(i));
  for (std::size_t i = 0; i < total; ++i) ref_sum += std::exp(element(i) - ref_max), ref_sq += element(i) * element(i);
  for (std::size_t i = 0; i < per_rank; ++i) {
    const double softmax = std::exp(x[i] - m[0]) / s[0];
    const double ref = std::exp(x[i] - ref_max) / ref_sum;
    EXAMPLE_CHECK(std::fabs(softmax - ref) <= 1e-12 + 1e-9 * ref, "rank %d softmax[%zu] %g vs %g", rank, i, softmax,
                  ref);
    const double l2 = x[i] / std::sqrt(sq[0]);
    EXAMPLE_CHECK(std::fabs(l2 - x[i] / std::sqrt(ref_sq)) <= 1e-12, "rank %d l2[%zu]", rank, i);
  }
  std::printf("rank %d: global max %.4f, sum exp %.4f, L2 norm %.4f\n", rank, m[0], s[0], std::sqrt(sq[0]));
  return 0;
}
