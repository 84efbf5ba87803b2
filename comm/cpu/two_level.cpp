#include "comm/cpu/two_level.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "comm/cpu/transports.hpp"
#include "comm/tags.hpp"
#include "store/prefix_store.hpp"

namespace ctrun::comm::cpu {

using algorithms::Algorithm;
using algorithms::AlgorithmRow;
using algorithms::Context;
using algorithms::Needs;
using algorithms::OpArgs;
using algorithms::OpKind;
using transport::Clock;

class TwoLevel::OpLevels final : public algorithms::Levels {
 public:
  OpLevels(TwoLevel& t, std::uint64_t tag, Clock::time_point deadline) : t_(t), tag_(tag), deadline_(deadline) {}

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
    Context ctx = cross_context(reps);
    const AlgorithmRow* row = algorithms::find_row(op, t_.cross_choice(op, args.buffer.bytes()));
    cross_name = algorithm_name(row->algorithm);
    row->run(ctx, args);
  }

  Context cross_context(const std::vector<int>& reps) override {
    return Context(t_.global_, host(), host_count(), tag_, deadline_, t_.cross_scratch_, t_.global_chunk_bytes_, reps);
  }

  char* pack(std::size_t bytes, int slot) override { return t_.pack_scratch_.get(bytes, slot); }

  std::string local_name = "-";
  std::string cross_name = "direct";

 private:
  TwoLevel& t_;
  std::uint64_t tag_;
  Clock::time_point deadline_;
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
  if (ctx.config.net_latency_us == 0 || ctx.config.net_mbps == 0) measure(ctx);
}

TwoLevel::~TwoLevel() = default;

// The lowest ranks of the first two hosts time 8-byte round trips (latency: half the fastest) and 1 MiB exchanges
// ended by a round trip (bandwidth: the median), then publish both in the store for every rank: all ranks must price
// alike.
void TwoLevel::measure(const BackendContext& ctx) {
  const int a = layout_.hosts[0][0];
  const int b = layout_.hosts[1][0];
  const auto deadline = Clock::now() + ctx.options.timeout;
  if (rank_ == a || rank_ == b) {
    const int peer = rank_ == a ? b : a;
    std::vector<char> big(std::size_t{1} << 20);
    char small[8] = {};
    double rtt = 1e9;
    auto round = [&](std::size_t bytes) {
      const auto t0 = Clock::now();
      if (rank_ == a) {
        global_.wait(global_.post_send(peer, kCostProbeTag, big.data(), bytes), deadline);
        global_.wait(global_.post_recv(peer, kCostProbeTag, small, sizeof small), deadline);
      } else {
        global_.wait(global_.post_recv(peer, kCostProbeTag, big.data(), bytes), deadline);
        global_.wait(global_.post_send(peer, kCostProbeTag, small, sizeof small), deadline);
      }
      return std::chrono::duration<double>(Clock::now() - t0).count();
    };
    // Both ranks send 1 MiB at once, as every algorithm's steps send and receive together (a CPU that cannot
    // drive the link both ways at its rate shows here, a one-way send hides it), then a round trip ends the timing.
    std::vector<char> in(big.size());
    auto exchange = [&] {
      const auto t0 = Clock::now();
      global_.wait({global_.post_send(peer, kCostProbeTag, big.data(), big.size()),
                    global_.post_recv(peer, kCostProbeTag, in.data(), in.size())},
                   deadline);
      round(8);
      return std::chrono::duration<double>(Clock::now() - t0).count();
    };
    for (int i = 0; i < 6; ++i) rtt = std::min(rtt, round(8));
    // Untimed: it empties a token-bucket shaper's burst (tc tbf passes its bucket at any speed and refills it only
    // while the link idles: with a 256 KiB bucket a first 1 MiB read 30 % over a 1 Gbit/s cap) and opens TCP's
    // window, so the timed ones see the rate back-to-back transfers get.
    exchange();
    // The median, not the fastest: a rank descheduled between two exchanges leaves the link idle and the shaper's
    // bucket refills, which makes the next one fast (up to 20 % over a 1 Gbit/s cap on a loaded machine).
    std::array<double, 3> bulks{exchange(), exchange(), exchange()};
    std::sort(bulks.begin(), bulks.end());
    const double bulk = bulks[1];
    if (rank_ == a) {
      const double latency = rtt / 2;
      const double bandwidth = static_cast<double>(big.size()) / std::max(bulk - rtt, 1e-6);
      char text[64];
      std::snprintf(text, sizeof text, "%.9f %.1f", latency, bandwidth);
      ctx.store->set("cost/net", text);
    }
  }
  try {
    ctx.store->wait({"cost/net"}, ctx.options.timeout);
  } catch (const store::TimeoutError& e) {
    throw TimeoutError(std::string("comm: the link between hosts was not timed in time: ") + e.what());
  }
  const std::string text = ctx.store->get("cost/net");
  double latency = 0;
  double bandwidth = 0;
  if (std::sscanf(text.c_str(), "%lf %lf", &latency, &bandwidth) != 2) {
    throw CommError("comm: bad cost/net record '" + text + "' in the group's store");
  }
  if (ctx.config.net_latency_us == 0) net_.latency_s = latency;
  if (ctx.config.net_mbps == 0) net_.bytes_per_s = bandwidth;
  measured_ = true;
}

bool TwoLevel::handles(OpKind op) {
  switch (op) {
    case OpKind::kAllReduce:
    case OpKind::kBroadcast:
    case OpKind::kReduce:
    case OpKind::kAllGather:
    case OpKind::kReduceScatter:
    case OpKind::kBarrier:
      return true;
    default:
      return false;
  }
}

Algorithm TwoLevel::cross_choice(OpKind op, std::size_t bytes) const {
  if (const AlgorithmRow* r = selector_.overridden(op, Needs::kAnyTransport)) return r->algorithm;
  const algorithms::Shape shape{static_cast<int>(layout_.hosts.size()), layout_.max_ranks_per_host(), bytes,
                                global_chunk_bytes_};
  if (const auto* row = algorithms::cheapest(op, shape, net_)) return row->algorithm;
  return Algorithm::kDirect;
}

void TwoLevel::run(OpKind op, const OpArgs& args, std::uint64_t tag, Clock::time_point deadline, std::string* name) {
  OpLevels lv(*this, tag, deadline);
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
  switch (op) {
    case OpKind::kAllReduce:
      return algorithms::two_level_all_reduce(lv, args);
    case OpKind::kBroadcast:
      return algorithms::two_level_broadcast(lv, args);
    case OpKind::kReduce:
      return algorithms::two_level_reduce(lv, args);
    case OpKind::kAllGather:
      return algorithms::two_level_all_gather(lv, args);
    case OpKind::kReduceScatter:
      return algorithms::two_level_reduce_scatter(lv, args);
    case OpKind::kBarrier:
      return algorithms::two_level_barrier(lv, args);
    default:
      throw CommError(std::string("comm: ") + op_name(op) + " has no two-level algorithm");
  }
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
