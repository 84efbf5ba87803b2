#include "comm/algorithms/selection.hpp"

#include <sstream>

#include "comm/types.hpp"

namespace ctrun::comm::algorithms {
namespace {

OpKind parse_op(const std::string& name) {
  for (const auto& o : op_table()) {
    if (name == o.name) return o.op;
  }
  throw InvalidArgumentError("unknown op '" + name + "' in the comm algorithm override (CTRUN_COMM_ALGO)");
}

bool usable(const AlgorithmRow& row, Needs available) { return row.needs <= available; }

}  // namespace

Selector::Selector(const std::string& spec) {
  std::stringstream in(spec);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.empty()) continue;
    const auto eq = item.find('=');
    if (eq == std::string::npos) {
      global_ = parse_algorithm(item);
      continue;
    }
    const OpKind op = parse_op(item.substr(0, eq));
    const Algorithm a = parse_algorithm(item.substr(eq + 1));
    if (a != Algorithm::kAuto && !find_row(op, a)) {
      throw InvalidArgumentError(std::string("comm algorithm '") + algorithm_name(a) + "' does not implement " +
                                 op_name(op) + " (CTRUN_COMM_ALGO)");
    }
    per_op_[op] = a;
  }
}

const AlgorithmRow* Selector::overridden(OpKind op, Needs available) const {
  if (auto it = per_op_.find(op); it != per_op_.end()) {
    if (const AlgorithmRow* r = find_row(op, it->second); r && usable(*r, available)) return r;
  }
  if (const AlgorithmRow* r = find_row(op, global_); r && usable(*r, available)) return r;
  return nullptr;
}

const CostRow* Selector::choose_cross(OpKind op, const Shape& shape, const LinkCost& link) const {
  if (const AlgorithmRow* r = overridden(op, Needs::kAnyTransport)) {
    if (const CostRow* priced = cost_row(op, r->algorithm)) return priced;
  }
  return cheapest(op, shape, link);
}

const AlgorithmRow* Selector::choose(OpKind op, std::size_t bytes, int group_size, Needs available) const {
  if (const AlgorithmRow* r = overridden(op, available)) return r;
  for (const auto& r : algorithm_table()) {
    if (r.op == op && r.automatic && usable(r, available) && bytes >= r.min_bytes && group_size >= r.min_ranks) {
      return &r;
    }
  }
  return nullptr;
}

}  // namespace ctrun::comm::algorithms
