#include "comm/transport/messenger.hpp"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <utility>

namespace ctrun::comm::transport {
namespace {

constexpr std::size_t kHeaderBytes = 16;
// Sends up to this size are copied with their header into one buffer: one write (one syscall / one ring copy)
// instead of two, which is most of the cost of a small message.
constexpr std::size_t kInlineBytes = 8192;
constexpr std::uint64_t kSeqMask = (1ull << 40) - 1;
constexpr std::size_t kMaxAbortReason = 4096;
// A message nobody has posted a receive for is buffered; beyond this size it is a protocol violation (or a
// hostile peer) rather than an early message, and buffering it could exhaust memory.
constexpr std::uint64_t kMaxUnexpectedBytes = 4ull << 30;

std::mutex g_names_mutex;
std::vector<std::string>& op_names() {
  static std::vector<std::string> names;
  return names;
}

void encode_header(char* out, std::uint64_t tag, std::uint64_t bytes) {
  std::memcpy(out, &tag, 8);
  std::memcpy(out + 8, &bytes, 8);
}

std::exception_ptr left_error(const std::string& peer_name) {
  return std::make_exception_ptr(
      PeerError(peer_name + " closed its process group: it sends nothing more (it finished or exited)"));
}

}  // namespace

std::uint64_t collective_tag(int op_kind, DataType dtype, std::uint64_t seq) {
  return kCollectiveBit | (static_cast<std::uint64_t>(op_kind & 0xff) << 48) |
         (static_cast<std::uint64_t>(dtype) << 40) | (seq & kSeqMask);
}

void set_op_kind_names(std::vector<std::string> names) {
  std::lock_guard lock(g_names_mutex);
  op_names() = std::move(names);
}

std::string describe_tag(std::uint64_t tag) {
  if (tag == kAbortTag) return "abort notice";
  if (tag == kByeTag) return "goodbye notice";
  if (!(tag & kCollectiveBit)) return "send/recv with tag " + std::to_string(tag);
  const int kind = static_cast<int>((tag >> 48) & 0xff);
  const auto dtype = static_cast<DataType>((tag >> 40) & 0xff);
  std::string name;
  {
    std::lock_guard lock(g_names_mutex);
    name = kind < static_cast<int>(op_names().size()) ? op_names()[kind] : "op " + std::to_string(kind);
  }
  return name + "(" + std::string(to_string(dtype)) + ") as collective call #" + std::to_string(tag & kSeqMask);
}

std::string Messenger::name_of(int peer) const {
  if (peer == kAnyPeer) return "any rank";
  const int named = names_.empty() ? peer : names_[static_cast<std::size_t>(peer)];
  return "rank " + std::to_string(named);
}

Messenger::Messenger(Transport& transport, int rank, int size)
    : transport_(transport), rank_(rank), size_(size), peers_(static_cast<std::size_t>(size)) {}

Messenger::~Messenger() = default;

RequestPtr Messenger::post_send(int peer, std::uint64_t tag, const void* data, std::size_t bytes) {
  auto r = std::make_shared<Request>();
  r->kind = Request::Kind::kSend;
  r->peer = peer;
  r->tag = tag;
  r->data = static_cast<char*>(const_cast<void*>(data));
  r->bytes = bytes;
  post(r);
  return r;
}

RequestPtr Messenger::post_recv(int peer, std::uint64_t tag, void* data, std::size_t bytes) {
  auto r = std::make_shared<Request>();
  r->kind = Request::Kind::kRecv;
  r->peer = peer;
  r->tag = tag;
  r->data = static_cast<char*>(data);
  r->bytes = bytes;
  post(r);
  return r;
}

void Messenger::post(const RequestPtr& r) {
  if (fatal_) return finish(r, fatal_);
  if (r->peer == kAnyPeer) return post_any_peer_recv(r);
  Peer& p = peers_.at(static_cast<std::size_t>(r->peer));
  if (r->kind == Request::Kind::kSend) {
    if (p.error) return finish(r, p.error);
    if (r->bytes <= kInlineBytes) {
      r->frame.resize(kHeaderBytes + r->bytes);
      encode_header(r->frame.data(), r->tag, r->bytes);
      if (r->bytes) std::memcpy(r->frame.data() + kHeaderBytes, r->data, r->bytes);
    }
    r->counted = true;
    ++in_flight_;
    p.sends.push_back(r);
    return;
  }
  r->order = ++posted_;
  // A message that already arrived (even from a peer that has since exited) is delivered first.
  auto it = p.unexpected.find(r->tag);
  if (it != p.unexpected.end() && !it->second.empty()) return take_unexpected(p, it, r);
  if (p.left) return finish(r, left_error(name_of(r->peer)));
  if (p.error) return finish(r, p.error);
  if (r->tag & kCollectiveBit) {
    for (const auto& [utag, queue] : p.unexpected) {
      if (!queue.empty()) check_signature(r->peer, utag, r->tag);
    }
  }
  r->counted = true;
  ++in_flight_;
  p.recvs[r->tag].push_back(r);
  ++p.pending_recvs;
  if (p.held) {
    // The held message may be this one (then it lands straight in r) or one that must be buffered to reach r.
    p.held = false;
    p.rehandle = true;
    transport_.pause_reads(r->peer, false);
  }
}

void Messenger::take_unexpected(Peer& p, std::map<std::uint64_t, std::deque<std::shared_ptr<Unexpected>>>::iterator it,
                                const RequestPtr& r) {
  auto u = it->second.front();
  it->second.pop_front();
  if (it->second.empty()) p.unexpected.erase(it);
  if (u->data.size() != r->bytes) {
    auto err = std::make_exception_ptr(PeerError(
        name_of(r->peer) + " sent " + std::to_string(u->data.size()) + " bytes for " + describe_tag(r->tag) +
        " but this rank expects " + std::to_string(r->bytes) + " bytes: the ranks passed different sizes"));
    finish(r, err);
    fail_peer(r->peer, err);
    return;
  }
  if (u->complete) {
    if (r->bytes) std::memcpy(r->data, u->data.data(), r->bytes);
    return finish(r);
  }
  r->counted = true;
  ++in_flight_;
  u->waiter = r;
}

void Messenger::post_any_peer_recv(const RequestPtr& r) {
  r->order = ++posted_;
  // The earliest message with this tag that any peer sent already.
  int from = kAnyPeer;
  std::uint64_t earliest = 0;
  std::exception_ptr broken;
  int alive = 0;
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    Peer& p = peers_[static_cast<std::size_t>(peer)];
    if (p.error && !p.left && !broken) broken = p.error;
    if (!p.error && !p.left) ++alive;
    auto it = p.unexpected.find(r->tag);
    if (it == p.unexpected.end() || it->second.empty()) continue;
    if (from == kAnyPeer || it->second.front()->arrival < earliest) {
      from = peer;
      earliest = it->second.front()->arrival;
    }
  }
  if (from != kAnyPeer) {
    r->peer = from;
    Peer& p = peers_[static_cast<std::size_t>(from)];
    return take_unexpected(p, p.unexpected.find(r->tag), r);
  }
  if (alive == 0) {  // no peer is left that could send it
    return finish(r, broken ? broken
                            : std::make_exception_ptr(PeerError(
                                  "every other rank closed its process group: nothing can arrive from any rank")));
  }
  r->counted = true;
  ++in_flight_;
  any_recvs_[r->tag].push_back(r);
  ++any_pending_;
  // Whatever a peer holds in its pipe may be in front of this receive's message: read every pipe from now on.
  for (int peer = 0; peer < size_; ++peer) {
    Peer& p = peers_[static_cast<std::size_t>(peer)];
    if (!p.held) continue;
    p.held = false;
    p.rehandle = true;
    transport_.pause_reads(peer, false);
  }
}

RequestPtr Messenger::match_posted(int peer, Peer& p, std::uint64_t tag) {
  auto it = p.recvs.find(tag);
  const bool own = it != p.recvs.end() && !it->second.empty();
  if (any_pending_ > 0) {
    auto any = any_recvs_.find(tag);
    if (any != any_recvs_.end() && (!own || any->second.front()->order < it->second.front()->order)) {
      RequestPtr r = std::move(any->second.front());
      any->second.pop_front();
      if (any->second.empty()) any_recvs_.erase(any);
      --any_pending_;
      r->peer = peer;
      return r;
    }
  }
  if (!own) return nullptr;
  RequestPtr r = std::move(it->second.front());
  it->second.pop_front();
  if (it->second.empty()) p.recvs.erase(it);
  --p.pending_recvs;
  return r;
}

void Messenger::check_signature(int peer, std::uint64_t incoming_tag, std::uint64_t posted_tag) const {
  if (!(incoming_tag & kCollectiveBit) || !(posted_tag & kCollectiveBit) || incoming_tag == kAbortTag) return;
  if ((incoming_tag & kSeqMask) != (posted_tag & kSeqMask) || incoming_tag == posted_tag) return;
  throw PeerError("mismatched collectives: " + name_of(peer) + " called " + describe_tag(incoming_tag) +
                  " while this rank (rank " + std::to_string(rank_) + ") called " + describe_tag(posted_tag) +
                  "; every rank must issue the same collectives, with the same dtype, in the same order");
}

void Messenger::finish(const RequestPtr& r, std::exception_ptr error) {
  if (r->finished) return;
  r->finished = true;
  r->error = std::move(error);
  if (r->counted) {
    r->counted = false;
    --in_flight_;
  }
  if (r->on_done) r->on_done(*r);
}

void Messenger::fail_peer(int peer, std::exception_ptr error) {
  Peer& p = peers_.at(static_cast<std::size_t>(peer));
  if (!p.error) p.error = error;
  auto sends = std::move(p.sends);
  p.sends.clear();
  for (auto& r : sends) finish(r, error);
  auto recvs = std::move(p.recvs);
  p.recvs.clear();
  p.pending_recvs = 0;
  for (auto& [tag, queue] : recvs) {
    for (auto& r : queue) finish(r, error);
  }
  if (p.target) finish(std::exchange(p.target, nullptr), error);
  // A receive from any peer may have been waiting for this one's message: it fails too, naming this peer, unless
  // the peer said goodbye first (it left in order and owes nobody a message).
  if (!p.left) {
    auto any = std::move(any_recvs_);
    any_recvs_.clear();
    any_pending_ = 0;
    for (auto& [tag, queue] : any) {
      for (auto& r : queue) finish(r, error);
    }
  }
  p.held = p.rehandle = false;
  if (p.stash) {
    // A partly received message can never complete: drop it (and whoever waits for it).
    if (p.stash->waiter) finish(p.stash->waiter, error);
    for (auto it = p.unexpected.begin(); it != p.unexpected.end();) {
      auto& q = it->second;
      q.erase(std::remove(q.begin(), q.end(), p.stash), q.end());
      it = q.empty() ? p.unexpected.erase(it) : std::next(it);
    }
    p.stash = nullptr;
  }
}

bool Messenger::progress_sends(int peer, Peer& p) {
  bool moved = false;
  while (!p.sends.empty()) {
    const RequestPtr& r = p.sends.front();
    if (!r->frame.empty()) {
      if (r->header_done < r->frame.size()) {
        const std::size_t n =
            transport_.write_some(peer, r->frame.data() + r->header_done, r->frame.size() - r->header_done);
        if (n == 0) return moved;
        r->header_done += n;
        moved = true;
        if (r->header_done < r->frame.size()) continue;
      }
      r->done = r->bytes;
    } else if (r->header_done < kHeaderBytes || r->done < r->bytes) {
      // Header and payload leave in one write straight from the user's buffer (no copy, no extra syscall).
      char header[kHeaderBytes];
      encode_header(header, r->tag, r->bytes);
      const std::size_t head = kHeaderBytes - r->header_done;
      std::size_t n =
          transport_.write_some2(peer, header + r->header_done, head, r->data + r->done, r->bytes - r->done);
      if (n == 0) return moved;
      moved = true;
      const std::size_t h = std::min(n, head);
      r->header_done += h;
      r->done += n - h;
      continue;
    }
    RequestPtr done = r;
    p.sends.pop_front();
    finish(done);
    moved = true;
  }
  return moved;
}

void Messenger::on_header(int peer, Peer& p) {
  std::uint64_t tag = 0;
  std::uint64_t len = 0;
  std::memcpy(&tag, p.header, 8);
  std::memcpy(&len, p.header + 8, 8);
  if (tag == kByeTag) {
    // Nothing follows: receives that name this peer can never complete.
    p.left = true;
    auto recvs = std::move(p.recvs);
    p.recvs.clear();
    p.pending_recvs = 0;
    for (auto& [ptag, queue] : recvs) {
      for (auto& r : queue) finish(r, left_error(name_of(peer)));
    }
    return;
  }
  if (tag == kAbortTag) {
    p.abort_remaining = std::min<std::uint64_t>(len, kMaxAbortReason);
    p.abort_reason.clear();
    if (p.abort_remaining == 0) throw PeerError(name_of(peer) + " aborted the group");
    return;
  }
  if (RequestPtr r = match_posted(peer, p, tag)) {
    if (len != r->bytes) {
      auto err = std::make_exception_ptr(
          PeerError(name_of(peer) + " sent " + std::to_string(len) + " bytes for " + describe_tag(tag) +
                    " but this rank expects " + std::to_string(r->bytes) + " bytes: the ranks passed different sizes"));
      finish(r, err);
      std::rethrow_exception(err);
    }
    if (len == 0) return finish(r);
    p.target = std::move(r);
    return;
  }
  if (tag & kCollectiveBit) {
    for (const auto& [ptag, queue] : p.recvs) {
      if (!queue.empty()) check_signature(peer, tag, ptag);
    }
  }
  if ((tag & kCollectiveBit) && p.pending_recvs == 0 && any_pending_ == 0) {
    // Early collective message and nothing else expected from this peer: leave it in the pipe (see messenger.hpp).
    p.held = true;
    transport_.pause_reads(peer, true);
    return;
  }
  if (len > kMaxUnexpectedBytes) {
    throw PeerError(name_of(peer) + " sent " + std::to_string(len) + " bytes for " + describe_tag(tag) +
                    " that no receive expects (more than the " + std::to_string(kMaxUnexpectedBytes) +
                    "-byte limit for early messages): a protocol error");
  }
  auto u = std::make_shared<Unexpected>();
  u->tag = tag;
  u->arrival = ++arrivals_;
  u->data.resize(len);
  u->complete = len == 0;
  p.unexpected[tag].push_back(u);
  if (!u->complete) p.stash = std::move(u);
}

bool Messenger::progress_recvs(int peer, Peer& p) {
  bool moved = false;
  for (;;) {
    if (p.held) return moved;
    if (p.rehandle) {
      p.rehandle = false;
      moved = true;
      on_header(peer, p);
      continue;
    }
    if (p.abort_remaining > 0) {
      char buf[512];
      const std::size_t n = transport_.read_some(peer, buf, std::min<std::size_t>(sizeof buf, p.abort_remaining));
      if (n == 0) return moved;
      p.abort_reason.append(buf, n);
      p.abort_remaining -= n;
      if (p.abort_remaining == 0) throw PeerError(name_of(peer) + " aborted the group: " + p.abort_reason);
      continue;
    }
    if (p.target) {
      Request& r = *p.target;
      const std::size_t n = transport_.read_some(peer, r.data + r.done, r.bytes - r.done);
      if (n == 0) return moved;
      moved = true;
      r.done += n;
      if (r.done == r.bytes) finish(std::exchange(p.target, nullptr));
      continue;
    }
    if (p.stash) {
      Unexpected& u = *p.stash;
      const std::size_t n = transport_.read_some(peer, u.data.data() + u.got, u.data.size() - u.got);
      if (n == 0) return moved;
      moved = true;
      u.got += n;
      if (u.got == u.data.size()) {
        u.complete = true;
        if (u.waiter) {
          // The recv was posted while this message was arriving: it was removed from the unexpected queue then.
          std::memcpy(u.waiter->data, u.data.data(), u.data.size());
          finish(std::exchange(u.waiter, nullptr));
        }
        p.stash = nullptr;
      }
      continue;
    }
    const std::size_t n = transport_.read_some(peer, p.header + p.header_got, kHeaderBytes - p.header_got);
    if (n == 0) return moved;
    moved = true;
    p.header_got += n;
    if (p.header_got < kHeaderBytes) continue;
    p.header_got = 0;
    on_header(peer, p);
  }
}

bool Messenger::progress() {
  bool moved = false;
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank_) continue;
    Peer& p = peers_[static_cast<std::size_t>(peer)];
    if (p.error) continue;
    try {
      if (!p.sends.empty()) moved |= progress_sends(peer, p);
      moved |= progress_recvs(peer, p);
    } catch (const CommError&) {
      fail_peer(peer, std::current_exception());
      moved = true;
    }
  }
  return moved;
}

bool Messenger::has_pending() const { return in_flight_ > 0; }

bool Messenger::has_pending_sends() const {
  for (const auto& p : peers_) {
    if (!p.sends.empty()) return true;
  }
  return false;
}

void Messenger::wait_for_events(std::uint64_t token, Clock::time_point until) {
  want_read_.clear();
  want_write_.clear();
  for (int peer = 0; peer < size_; ++peer) {
    const Peer& p = peers_[static_cast<std::size_t>(peer)];
    if (peer == rank_ || p.error) continue;
    if (!p.sends.empty()) want_write_.push_back(peer);
    if (p.pending_recvs > 0 || (any_pending_ > 0 && !p.left) || p.target || (p.stash && p.stash->waiter)) {
      want_read_.push_back(peer);
    }
    // Mid-payload, waking up for a few bytes only costs a context switch; headers and stashes wake on any byte.
    if (p.held) continue;
    transport_.expect_bytes(peer, p.target && p.abort_remaining == 0 ? p.target->bytes - p.target->done : 1);
  }
  try {
    transport_.wait_event(token, until, want_read_, want_write_);
  } catch (const CommError& e) {
    // The transport noticed a dead peer or was told to abort: everything waiting fails with its reason.
    abort(e.what(), std::current_exception());
  }
}

void Messenger::progress_or_wait(std::uint64_t token, Clock::time_point until) {
  if (progress()) return;
  wait_for_events(token, until);
}

void Messenger::wait(const std::vector<RequestPtr>& requests, Clock::time_point deadline) {
  for (bool noted = false;; noted = true) {
    const std::uint64_t token = transport_.event_token();
    progress();
    bool all = true;
    for (const auto& r : requests) {
      if (!r->finished) {
        all = false;
      } else if (r->error) {
        std::rethrow_exception(r->error);
      }
    }
    if (all) return;
    if (fatal_) std::rethrow_exception(fatal_);
    if (Clock::now() >= deadline) {
      for (const auto& r : requests) {
        if (r->finished) continue;
        const bool send = r->kind == Request::Kind::kSend;
        throw TimeoutError("timed out waiting for " + name_of(r->peer) + " (" + (send ? "send of " : "receive of ") +
                           std::to_string(r->bytes) + " bytes, " + std::to_string(r->done) + " done, for " +
                           describe_tag(r->tag) + "): the peer is stalled, dead, or called a different op");
      }
    }
    if (!noted && progress_) {
      // About to block: the peer of the first unfinished receive (else send) is the one this step waits for.
      int peer = -1;
      for (const auto& r : requests) {
        if (!r->finished && (peer < 0 || r->kind == Request::Kind::kRecv)) peer = r->peer;
        if (!r->finished && r->kind == Request::Kind::kRecv) break;
      }
      progress_->waiting(peer);
    }
    wait_for_events(token, deadline);
  }
}

void Messenger::close(std::exception_ptr error) {
  if (!fatal_) fatal_ = error;
  for (int peer = 0; peer < size_; ++peer) {
    if (peer != rank_) fail_peer(peer, error);
  }
}

void Messenger::say_goodbye() {
  if (fatal_) return;  // an abort told the peers already
  char frame[kHeaderBytes];
  encode_header(frame, kByeTag, 0);
  for (int peer = 0; peer < size_; ++peer) {
    Peer& p = peers_[static_cast<std::size_t>(peer)];
    if (peer == rank_ || p.error || !transport_.connected(peer)) continue;
    if (!p.sends.empty() && p.sends.front()->header_done > 0) continue;  // mid-message: the frame would corrupt it
    try {
      transport_.write_some(peer, frame, sizeof frame);
    } catch (const CommError&) {
    }
  }
}

void Messenger::abort(const std::string& reason, std::exception_ptr error) {
  if (fatal_) return;
  fatal_ = error;
  // Best effort: tell every peer why, where its stream is between two messages (else the frame would corrupt it).
  std::string frame(kHeaderBytes, '\0');
  const std::string text = reason.substr(0, kMaxAbortReason);
  encode_header(frame.data(), kAbortTag, text.size());
  frame += text;
  for (int peer = 0; peer < size_; ++peer) {
    Peer& p = peers_[static_cast<std::size_t>(peer)];
    if (peer == rank_ || p.error || !transport_.connected(peer)) continue;
    if (!p.sends.empty() && p.sends.front()->header_done > 0) continue;
    try {
      transport_.write_some(peer, frame.data(), frame.size());
    } catch (const CommError&) {
    }
  }
  for (int peer = 0; peer < size_; ++peer) {
    if (peer != rank_) fail_peer(peer, error);
  }
  transport_.abort(reason);
}

}  // namespace ctrun::comm::transport
