#pragma once
// The parsers behind the flag table's rows: a flag's text, as the command line, a --config file, PET_<NAME> or
// the table's default spells it, into a typed value. Each throws FlagValueError saying what is accepted; whoever
// applies the row names the flag and where its text came from.

#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "agent/base/launch_config.hpp"

namespace ctrun::agent {

class FlagValueError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The one boolean rule, wherever ctrun reads a boolean flag as text: torchrun's bool(int(text)), with Python's
// int() (blanks around, one sign, '_' between digits: " 1", "+1", "1_0"), and besides true/false in any case
// (JSON and shell habits). Empty is false. Anything else throws.
bool parse_flag_bool(std::string_view text);

// An integer as Python's int() reads it, within [min, max]; outside it, `range` is the complaint.
long long parse_flag_int(std::string_view text, long long min, long long max, std::string_view range);

// Seconds, integer or decimal; `positive`: 0 refused too.
double parse_flag_seconds(std::string_view text, bool positive);

// A duration with its unit, `30s`, `1.5m`, `2h` (> 0): seconds; nullopt for text without a unit (a count, for
// the caller to read); a unit with a bad number or a zero throws FlagValueError.
std::optional<double> parse_flag_duration(std::string_view text);

// torchrun's -r/--redirects and -t/--tee: 0-3 for every rank, or a map of single-digit ranks `0:1,1:2`.
StdSpec parse_std_spec(std::string_view text);

// --local-ranks-filter: comma-separated local ranks (>= 0); empty: every rank.
std::vector<int> parse_local_ranks(std::string_view text);

// --signals-to-handle: signal names, comma-separated; SIGKILL, SIGSTOP and SIGCHLD cannot be handled.
std::vector<int> parse_signal_list(std::string_view text);

// --preload: dotted module names, comma-separated.
std::vector<std::string> parse_module_list(std::string_view text);

// --rdzv-backend: static, c10d, etcd (etcd-v3); etcd-v2 is refused with the reason (a UsageError of its own).
rdzv::Backend parse_rdzv_backend(std::string_view text);

// --numa-binding: what ctrun implements of torchrun's modes; the others are refused with the reason.
NumaBinding parse_numa_binding(std::string_view text);

// --cpu-bind: none, core, numa.
CpuBind parse_cpu_bind(std::string_view text);

}  // namespace ctrun::agent
