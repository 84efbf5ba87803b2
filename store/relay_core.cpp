#include "store/relay_core.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "store/keyspace.hpp"

namespace ctrun::store::detail {

using protocol::Command;
namespace reply = protocol::reply;

namespace {

// Bookkeeping counted besides the bytes of keys and values (as the keyspace counts its entries). A request going
// upstream is counted twice before anything is allocated for it: the copy a batch keeps (its reply's shape, and what
// later clients join) and the encoded copy queued for the upstream until it is written (request_cost each).
constexpr std::uint64_t kClientCost = kEntryOverhead;
constexpr std::uint64_t kMemberCost = 32;
constexpr std::uint64_t kBatchCost = 2 * kEntryOverhead;
constexpr std::uint64_t kNoReplyCost = 32;

std::uint64_t request_cost(const protocol::Request& r) {
  std::uint64_t n = kEntryOverhead;
  for (const auto& k : r.keys) n += k.size() + 32;
  for (const auto& v : r.values) n += v.size() + 32;
  return n;
}

// What identical requests share: the command and its keys (an ADD's delta is not part of it).
std::string ident_of(const protocol::Request& r) {
  std::string id(1, static_cast<char>(r.command));
  for (const auto& k : r.keys) protocol::put_bytes(id, k);
  return id;
}

}  // namespace

std::size_t RelayCore::Batch::live() const {
  return static_cast<std::size_t>(
      std::count_if(members.begin(), members.end(), [](const Member& m) { return !m.gone; }));
}

RelayCore::Batch* RelayCore::batch(std::uint64_t id) {
  auto it = batches_.find(id);
  return it == batches_.end() ? nullptr : it->second.get();
}

ExecResult RelayCore::too_big(const protocol::Request& r, std::uint64_t cost) const {
  return {.close = true,
          .reason = fmt::format("{}: holding its {} bytes would exceed the relay's memory limit of {} bytes ({} held)",
                                protocol::command_name(r.command), cost, max_total_bytes_, bytes_ + io_bytes_),
          .refusal = Refusal::kMemory};
}

ExecResult RelayCore::execute(ConnId client, const protocol::Request& r) {
  ReplyBuffer* out = port_.output(client);
  if (!out) return {};
  const bool here = r.command == Command::kValidate || r.command == Command::kPing || r.command == Command::kCancelWait;
  if (!here && port_.congested()) {
    // Not taken: stepped again once the upstream drained (FrontEnd::resume).
    if (std::find(congested_.begin(), congested_.end(), client) == congested_.end()) congested_.push_back(client);
    return {.more = true, .hold = true};
  }
  auto it = clients_.find(client);
  if (it == clients_.end()) {
    if (!fits(kClientCost)) return too_big(r, kClientCost);
    it = clients_.emplace(client, Client{}).first;
    bytes_ += kClientCost;
  }
  Client& cl = it->second;
  ++counters_.client_requests;
  // As on the store: any new request ends a pending WAIT (torch 1.13 times out without a word and goes on).
  if (r.command != Command::kCancelWait && r.command != Command::kValidate) leave_wait(cl, client);

  switch (r.command) {
    case Command::kValidate:
      ++counters_.answered_here;
      if (r.u32 != protocol::kValidationMagic)
        return {.close = true, .reason = fmt::format("VALIDATE with wrong magic 0x{:08X}", r.u32)};
      return {};
    case Command::kPing:
      ++counters_.answered_here;
      reply::ping(*out, r.u32);
      return {};
    case Command::kCancelWait:
      // Replied even when nothing was pending; a STOP_WAITING already sent was read first by the client.
      ++counters_.answered_here;
      leave_wait(cl, client);
      reply::wait_canceled(*out);
      return {};
    case Command::kWatchKey:
    case Command::kOnClose:
    case Command::kOnSilence:
    case Command::kMultiplex:
    case Command::kPeek:  // never announced here (the PING above is an exact echo): a ctrun client does not send it
      return {.close = true,
              .reason = fmt::format("{} belongs to a connection of the store itself and is not relayed; connect to "
                                    "MASTER_ADDR:MASTER_PORT for it",
                                    protocol::command_name(r.command))};
    case Command::kWait:
      if (r.keys.empty()) {
        ++counters_.answered_here;
        reply::stop_waiting(*out);
        return {};
      }
      return join_wait(client, cl, r);
    case Command::kBarrier:
      return single(client, cl, r, Kind::kWait);
    case Command::kGet:
    case Command::kCheck:
    case Command::kMultiGet:
    case Command::kGetNumKeys:
      return combine(client, cl, r, Kind::kRead);
    case Command::kAdd:
      return combine(client, cl, r, Kind::kAdd);
    case Command::kQueuePush:
    case Command::kQueuePop:
    case Command::kQueueLen:
      if (!queue_keys_.count(r.keys[0])) {
        const std::uint64_t cost = r.keys[0].size() + kEntryOverhead;
        if (!fits(cost)) return too_big(r, cost);
        queue_keys_.insert(r.keys[0]);
        bytes_ += cost;
      }
      return r.command == Command::kQueuePush ? send_without_reply(client, cl, r)
                                              : single(client, cl, r, Kind::kSingle);
    case Command::kSet:
    case Command::kAppend:
    case Command::kMultiSet:
      return send_without_reply(client, cl, r);
    case Command::kCompareSet:
    case Command::kDeleteKey:
    case Command::kListKeys:
      return single(client, cl, r, Kind::kSingle);
  }
  return {.close = true, .reason = "unhandled command"};
}

RelayCore::Batch& RelayCore::make_batch(Kind kind, const protocol::Request& r, std::string ident, std::uint64_t cost) {
  auto b = std::make_unique<Batch>();
  b->kind = kind;
  b->request = r;
  b->ident = std::move(ident);
  b->id = next_id_++;
  b->cost = cost;
  bytes_ += cost;
  Batch& ref = *b;
  batches_.emplace(ref.id, std::move(b));
  return ref;
}

ExecResult RelayCore::join_wait(ConnId client, Client& cl, const protocol::Request& r) {
  // A queue's push wakes one waiter: a WAIT on a queue's key goes up for its client alone.
  if (std::any_of(r.keys.begin(), r.keys.end(), [&](const std::string& k) { return queue_keys_.count(k) > 0; })) {
    return single(client, cl, r, Kind::kWait);
  }
  std::string ident = ident_of(r);
  Batch* target = nullptr;
  if (auto o = open_.find(ident); o != open_.end()) {
    target = batch(o->second);
  } else if (auto f = in_flight_.find(ident); f != in_flight_.end()) {
    Batch* b = batch(f->second);
    // Only a WAIT sent after this client's previous request was answered: it then ran on the store after
    // everything this client did.
    if (b && !b->canceled && b->tag > cl.floor) target = b;
  }
  if (target) {
    if (!fits(kMemberCost)) return too_big(r, kMemberCost);
    target->members.push_back({client});
    target->cost += kMemberCost;
    bytes_ += kMemberCost;
    ++counters_.combined;
    cl.wait = target->id;
    return {};
  }
  const std::uint64_t cost = kBatchCost + request_cost(r) + ident.size() + kMemberCost;
  if (!fits(cost + request_cost(r))) return too_big(r, cost + request_cost(r));
  Batch& b = make_batch(Kind::kWait, r, std::move(ident), cost);
  b.members.push_back({client});
  open_[b.ident] = b.id;
  due_.push_back(b.id);
  port_.want_flush();
  cl.wait = b.id;
  return {};
}

ExecResult RelayCore::combine(ConnId client, Client& cl, const protocol::Request& r, Kind kind) {
  std::string ident = ident_of(r);
  if (auto o = open_.find(ident); o != open_.end()) {
    Batch& b = *batch(o->second);
    std::int64_t sum = b.request.integer;
    if (kind == Kind::kAdd && __builtin_add_overflow(sum, r.integer, &sum))
      return {.close = true,
              .reason = fmt::format("ADD {} to '{}' overflows together with the adds combined with it", r.integer,
                                    r.keys[0])};
    if (!fits(kMemberCost)) return too_big(r, kMemberCost);
    b.request.integer = sum;
    b.members.push_back({client, r.integer});
    b.cost += kMemberCost;
    bytes_ += kMemberCost;
    ++counters_.combined;
    cl.held = b.id;
    return {.hold = true};
  }
  const std::uint64_t cost = kBatchCost + request_cost(r) + ident.size() + kMemberCost;
  if (!fits(cost + request_cost(r))) return too_big(r, cost + request_cost(r));
  Batch& b = make_batch(kind, r, std::move(ident), cost);
  b.members.push_back({client, r.integer});
  open_[b.ident] = b.id;
  // One in flight: this one waits for it (finish()), so that it is answered by a request sent after it arrived.
  if (!in_flight_.count(b.ident)) {
    due_.push_back(b.id);
    port_.want_flush();
  }
  cl.held = b.id;
  return {.hold = true};
}

ExecResult RelayCore::single(ConnId client, Client& cl, const protocol::Request& r, Kind kind) {
  const std::uint64_t cost = kBatchCost + request_cost(r) + kMemberCost;
  if (!fits(cost + request_cost(r))) return too_big(r, cost + request_cost(r));
  Batch& b = make_batch(kind, r, std::string(), cost);
  b.members.push_back({client});
  send_batch(b);
  if (kind == Kind::kWait) {  // BARRIER: answered later; the client may cancel it meanwhile
    cl.wait = b.id;
    return {};
  }
  cl.held = b.id;
  return {.hold = true};
}

ExecResult RelayCore::send_without_reply(ConnId client, Client& cl, const protocol::Request& r) {
  if (!fits(kNoReplyCost + request_cost(r))) return too_big(r, kNoReplyCost + request_cost(r));
  const std::uint64_t tag = next_tag_++;
  port_.send(tag, r);
  ++counters_.upstream_requests;
  no_reply_.push_back({tag, client});
  bytes_ += kNoReplyCost;
  cl.floor = tag;
  maybe_fence();
  return {};
}

void RelayCore::send_batch(Batch& b) {
  b.tag = next_tag_++;
  by_tag_[b.tag] = b.id;
  if (!b.ident.empty()) in_flight_[b.ident] = b.id;
  port_.send(b.tag, b.request);
  ++counters_.upstream_requests;
}

void RelayCore::flush_batches() {
  std::vector<std::uint64_t> due;
  due.swap(due_);
  for (std::uint64_t id : due) {
    Batch* b = batch(id);
    if (!b || b->tag != 0) continue;
    if (auto o = open_.find(b->ident); o != open_.end() && o->second == id) open_.erase(o);
    if (b->live() == 0) {  // everyone left before it went
      bytes_ -= b->cost;
      batches_.erase(id);
      continue;
    }
    send_batch(*b);
  }
}

void RelayCore::decongested() {
  std::vector<ConnId> held;
  held.swap(congested_);
  for (ConnId c : held) port_.resume(c);
}

void RelayCore::maybe_fence() {
  if (fence_ != 0 || no_reply_.size() < kFenceEvery) return;
  fence_ = next_tag_++;
  protocol::Request ping;
  ping.command = Command::kPing;
  port_.send(fence_, ping);
  ++counters_.upstream_requests;
}

void RelayCore::drop_no_reply_before(std::uint64_t tag) {
  // The store runs a connection's requests in order: once a request's immediate reply is here, every earlier
  // request was run, and its refusal, had there been one, came before.
  while (!no_reply_.empty() && no_reply_.front().tag < tag) {
    no_reply_.pop_front();
    bytes_ -= kNoReplyCost;
  }
}

const protocol::Request* RelayCore::sent(std::uint64_t tag) const {
  static const protocol::Request kPing{.command = Command::kPing};
  if (tag != 0 && tag == fence_) return &kPing;
  auto t = by_tag_.find(tag);
  if (t == by_tag_.end()) return nullptr;
  auto b = batches_.find(t->second);
  return b == batches_.end() ? nullptr : &b->second->request;
}

bool RelayCore::on_reply(std::uint64_t tag, protocol::Reply reply) {
  if (tag != 0 && tag == fence_) {
    fence_ = 0;
    drop_no_reply_before(tag);
    return true;
  }
  auto t = by_tag_.find(tag);
  if (t == by_tag_.end()) return false;
  Batch& b = *batch(t->second);
  if (b.canceled) {
    // Every member had left: a STOP_WAITING that crossed the cancel comes first, then WAIT_CANCELED ends it.
    if (reply.u8 == static_cast<std::uint8_t>(protocol::WaitResponse::kWaitCanceled)) finish(b);
    return true;
  }
  if (b.kind != Kind::kWait) drop_no_reply_before(tag);
  answer(b, reply);
  finish(b);
  return true;
}

void RelayCore::answer(const Batch& b, protocol::Reply& reply) {
  const Command c = b.request.command;
  std::vector<BlobPtr> values;  // GET and MULTI_GET values, shared by every member's reply
  std::string encoded;          // any other reply, encoded once
  if (c == Command::kGet || c == Command::kMultiGet) {
    values.reserve(reply.values.size());
    for (auto& v : reply.values) values.push_back(std::make_shared<Blob>(std::move(v)));
  } else if (c != Command::kAdd) {
    protocol::encode_reply(protocol::Dialect::kV2, b.request, reply, encoded);
  }
  // ADD: the members' adds ran one after another in join order, ending at the store's value.
  auto running = static_cast<std::uint64_t>(reply.integer) - static_cast<std::uint64_t>(b.request.integer);
  for (const Member& m : b.members) {
    running += static_cast<std::uint64_t>(m.delta);
    if (m.gone) continue;
    ReplyBuffer* out = port_.output(m.client);
    if (!out) continue;
    reply_to(m.client, *out, b, values, encoded, static_cast<std::int64_t>(running));
  }
}

void RelayCore::reply_to(ConnId client, ReplyBuffer& out, const Batch& b, const std::vector<BlobPtr>& values,
                         const std::string& encoded, std::int64_t integer) {
  const Command c = b.request.command;
  if (c == Command::kGet || c == Command::kMultiGet) {
    for (const auto& v : values) reply::value(out, v);
  } else if (c == Command::kAdd) {
    reply::integer(out, integer);
  } else {
    out.raw(encoded);
  }
  auto it = clients_.find(client);
  if (it == clients_.end()) return;
  Client& cl = it->second;
  cl.floor = next_tag_ - 1;  // every request sent so far ran before this answer left the store
  if (b.kind == Kind::kWait) {
    if (cl.wait == b.id) cl.wait = 0;
  } else if (cl.held == b.id) {
    cl.held = 0;
    port_.resume(client);
  }
}

bool RelayCore::on_refused(std::uint64_t tag, const std::string& reason) {
  const std::string why = "the job's store refused its request: " + reason;
  if (tag != 0 && tag == fence_) {
    fence_ = 0;
    return true;
  }
  if (auto t = by_tag_.find(tag); t != by_tag_.end()) {
    Batch& b = *batch(t->second);
    for (const Member& m : b.members) {
      if (m.gone) continue;
      if (auto c = clients_.find(m.client); c != clients_.end()) {
        if (c->second.wait == b.id) c->second.wait = 0;
        if (c->second.held == b.id) c->second.held = 0;
      }
      port_.fail(m.client, Refusal::kInvalid, why);
    }
    finish(b);
    return true;
  }
  for (auto it = no_reply_.begin(); it != no_reply_.end(); ++it) {
    if (it->tag != tag) continue;
    const ConnId client = it->client;
    no_reply_.erase(it);
    bytes_ -= kNoReplyCost;
    port_.fail(client, Refusal::kInvalid, why);
    return true;
  }
  return false;
}

void RelayCore::finish(Batch& b) {
  const std::uint64_t id = b.id;
  by_tag_.erase(b.tag);
  if (!b.ident.empty()) {
    if (auto f = in_flight_.find(b.ident); f != in_flight_.end() && f->second == id) in_flight_.erase(f);
    // The identical request that waited for this one goes now.
    if (b.kind != Kind::kWait) {
      if (auto o = open_.find(b.ident); o != open_.end()) {
        due_.push_back(o->second);
        port_.want_flush();
      }
    }
  }
  bytes_ -= b.cost;
  batches_.erase(id);
}

void RelayCore::leave_wait(Client& cl, ConnId client) {
  if (cl.wait == 0) return;
  const std::uint64_t id = cl.wait;
  cl.wait = 0;
  leave(id, client);
}

void RelayCore::leave(std::uint64_t id, ConnId client) {
  Batch* b = batch(id);
  if (!b) return;
  for (Member& m : b->members)
    if (m.client == client && !m.gone) {
      m.gone = true;
      break;
    }
  if (b->live() > 0) return;
  if (b->tag == 0) {
    // Not sent yet: it never will be (flush_batches skips it).
    if (auto o = open_.find(b->ident); o != open_.end() && o->second == id) open_.erase(o);
    bytes_ -= b->cost;
    batches_.erase(id);
  } else if (b->kind == Kind::kWait && !b->canceled) {
    // Nobody waits any more: the store forgets the wait (its frames, 00 perhaps and then 01, end it here).
    b->canceled = true;
    if (auto f = in_flight_.find(b->ident); f != in_flight_.end() && f->second == id) in_flight_.erase(f);
    protocol::Request cancel;
    cancel.command = Command::kCancelWait;
    port_.send(b->tag, cancel);
    ++counters_.upstream_requests;
  }
  // A read or ADD in flight whose clients all left: its reply is dropped when it comes.
}

void RelayCore::forget(ConnId client) {
  congested_.erase(std::remove(congested_.begin(), congested_.end(), client), congested_.end());
  auto it = clients_.find(client);
  if (it == clients_.end()) return;
  Client& cl = it->second;
  leave_wait(cl, client);
  if (cl.held != 0) leave(cl.held, client);
  clients_.erase(it);
  bytes_ -= kClientCost;
}

void RelayCore::reset() {
  for (auto& [id, b] : batches_) bytes_ -= b->cost;
  batches_.clear();
  by_tag_.clear();
  open_.clear();
  in_flight_.clear();
  due_.clear();
  bytes_ -= no_reply_.size() * kNoReplyCost;
  no_reply_.clear();
  fence_ = 0;
  congested_.clear();
  for (const auto& k : queue_keys_) bytes_ -= k.size() + kEntryOverhead;
  queue_keys_.clear();
  for (auto& [id, cl] : clients_) cl.wait = cl.held = 0;
}

}  // namespace ctrun::store::detail
