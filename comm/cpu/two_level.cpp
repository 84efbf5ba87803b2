#include "comm/cpu/two_level.hpp"

#include <algorithm>
#include <cstdio>

#include "comm/cpu/link_probe.hpp"
#include "comm/cpu/transports.hpp"
#include "store/prefix_store.hpp"

namespace ctrun::comm::cpu {

using algorithms::Algorithm;
using algorithms::AlgorithmRow;
using algorithms::Context;
using algorithms::Needs;
using algorithms::OpArgs;
using algorithms::OpKind;
using transport::Clock;

// One op's levels: `bytes` is the op's per-rank message, which prices its cross step.
class TwoLevel::OpLevels final : public algorithms::Levels {
 public:
  OpLevels(TwoLevel& t, std::uint64_t tag, Clock::time_point deadline, std::size_t bytes)
      : t_(t), tag_(tag), deadline_(deadline), bytes_(bytes) {}

  const algorithms::HostLayout& layout() const override { return t_.layout_; }
  int rank() const override { return t_.rank_; }

  void run_local(OpKind op, const OpArgs& args) override {
    Context ctx = t_.local_messenger_
                      ? Context(*t_.local_messenger_, local_rank(), local_size(), tag_, deadline_, t_.local_scratch_,
                                t_.local_chunk_bytes_)
                      : Context(t_.global_, 0, 1, tag_, deadline_, t_.local_scratch_, t_.global_chunk_bytes_, t_.self_);
    const AlgorithmRow* row = t_.selector_.choose(op, args.buffer.bytes(), local_size(), t_.local_available_);
    local_name = algorithm_name(row->algorithm);
    row->run(ctx, args);
  }

  void run_cross(OpKind op, const OpArgs& args, const std::vector<int>& reps) override {
    Context ctx(t_.global_, host(), host_count(), tag_, deadline_, t_.cross_scratch_, t_.global_chunk_bytes_, reps);
    const AlgorithmRow* row = algorithms::find_row(op, t_.cross_choice(op, bytes_));
    cross_name = algorithm_name(row->algorithm);
    row->run(ctx, args);
  }

  char* pack(std::size_t bytes) override { return t_.pack_scratch_.get(bytes); }

  std::string local_name = "-";
  std::string cross_name = "-";  // a rank that takes no cross step (not its host's representative)

 private:
  TwoLevel& t_;
  std::uint64_t tag_;
  Clock::time_point deadline_;
  std::size_t bytes_;
};

TwoLevel::TwoLevel(const BackendContext& ctx, algorithms::HostLayout layout, transport::Messenger& global,
                   const algorithms::Selector& selector, std::size_t global_chunk_bytes)
    : layout_(std::move(layout)),
      rank_(ctx.rank),
      global_(global),
      selector_(selector),
      global_chunk_bytes_(global_chunk_bytes),
      local_chunk_bytes_(ctx.config.chunk_bytes_for("shm")),
      self_{ctx.rank} {
  const auto& mine = layout_.hosts[static_cast<std::size_t>(layout_.host_of[static_cast<std::size_t>(rank_)])];
  if (mine.size() > 1) {
    const int host = layout_.host_of[static_cast<std::size_t>(rank_)];
    std::string prefix = "host";
    prefix += std::to_string(host);
    auto store = std::make_shared<store::PrefixStore>(prefix, ctx.store);
    local_transport_ =
        make_shm(ctx, store, layout_.local_index[static_cast<std::size_t>(rank_)], static_cast<int>(mine.size()), mine);
    local_messenger_ = std::make_unique<transport::Messenger>(
        *local_transport_, layout_.local_index[static_cast<std::size_t>(rank_)], static_cast<int>(mine.size()));
    local_messenger_->set_peer_names(mine);
    if (auto* ws = local_transport_->workspace()) {
      local_available_ = ws->peer_reads() ? Needs::kPeerReads : Needs::kSharedMemory;
    }
  }
  local_ = {static_cast<double>(ctx.config.shm_latency_us) * 1e-6, static_cast<double>(ctx.config.shm_mbps) * 1e6};
  net_ = {static_cast<double>(ctx.config.net_latency_us) * 1e-6, static_cast<double>(ctx.config.net_mbps) * 1e6};
  if (ctx.config.net_latency_us == 0 || ctx.config.net_mbps == 0) {
    const algorithms::LinkCost timed = probe_link(ctx, layout_, global_);
    if (ctx.config.net_latency_us == 0) net_.latency_s = timed.latency_s;
    if (ctx.config.net_mbps == 0) net_.bytes_per_s = timed.bytes_per_s;
    measured_ = true;
  }
}

TwoLevel::~TwoLevel() = default;

bool TwoLevel::handles(OpKind op) { return algorithms::find_two_level(op) != nullptr; }

Algorithm TwoLevel::cross_choice(OpKind op, std::size_t bytes) const {
  const algorithms::Shape shape{static_cast<int>(layout_.hosts.size()), layout_.max_ranks_per_host(), bytes,
                                global_chunk_bytes_};
  const algorithms::CostRow* row = selector_.choose_cross(op, shape, net_);
  if (!row) throw CommError(std::string("comm: ") + op_name(op) + " has no algorithm between hosts");
  return row->algorithm;
}

void TwoLevel::run(OpKind op, const OpArgs& args, std::uint64_t tag, Clock::time_point deadline, std::string* name) {
  const algorithms::TwoLevelRow* row = algorithms::find_two_level(op);
  if (!row) throw CommError(std::string("comm: ") + op_name(op) + " has no two-level algorithm");
  OpLevels lv(*this, tag, deadline, args.buffer.bytes());
  struct Name {  // the algorithms chosen so far, however the op ends
    OpLevels& lv;
    std::string* out;
    ~Name() {
      *out = "two levels: ";
      *out += lv.local_name;
      *out += " in hosts, ";
      *out += lv.cross_name;
      *out += " between";
    }
  } named{lv, name};
  row->run(lv, args);
}

void TwoLevel::abort(const std::string& reason, std::exception_ptr error) {
  if (local_messenger_) local_messenger_->abort(reason, error);
}

void TwoLevel::close(std::exception_ptr error) {
  if (local_messenger_) local_messenger_->close(error);
}

std::string TwoLevel::describe() const {
  std::size_t lo = layout_.host_of.size();
  std::size_t hi = 0;
  for (const auto& h : layout_.hosts) lo = std::min(lo, h.size()), hi = std::max(hi, h.size());
  char text[160];
  std::snprintf(text, sizeof text, "%zu hosts x %zu-%zu ranks, between hosts %.1f us %.0f MB/s (%s)",
                layout_.hosts.size(), lo, hi, net_.latency_s * 1e6, net_.bytes_per_s / 1e6,
                measured_ ? "measured" : "settings");
  return text;
}

std::string TwoLevel::local_ranks_text() const {
  const int host = layout_.host_of[static_cast<std::size_t>(rank_)];
  std::string out = "host ";
  out += std::to_string(host);
  out += "'s local ranks 0.. are group ranks";
  for (int r : layout_.hosts[static_cast<std::size_t>(host)]) {
    out += ' ';
    out += std::to_string(r);
  }
  return out;
}

}  // namespace ctrun::comm::cpu
