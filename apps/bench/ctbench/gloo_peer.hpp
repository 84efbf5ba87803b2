#pragma once
// Runs torch 1.13's gloo backend on the same ops and sizes (torch_gloo_bench.py under Debian's torchrun,
// through the py3.11 wrapper in ../shared/interop) and parses its rows.

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "measure.hpp"

namespace ctrun::bench {

// (op, bytes) -> row. Empty when python3/torch is unavailable; `why` then says why.
std::map<std::pair<std::string, std::size_t>, Row> run_gloo(int nproc, const std::vector<std::string>& ops,
                                                            const std::vector<std::size_t>& sizes, std::string* why);

}  // namespace ctrun::bench
