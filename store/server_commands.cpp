#include "store/server_commands.hpp"

#include <fmt/format.h>

#include "store/store_util.hpp"

namespace ctrun::store::detail {

using protocol::Command;
namespace reply = protocol::reply;

namespace {

// An empty value for events about a missing side (the old value of a created key, the new one of a delete).
const BlobPtr& empty_blob() {
  static const BlobPtr b = std::make_shared<Blob>(std::string());
  return b;
}

ExecResult closing(const Refusable& r) { return {true, r.refused, false, r.kind}; }
ExecResult closing(std::string reason) { return closing(Refusable{std::move(reason)}); }

ExecResult refused_or(const Refusable& r) { return r.ok() ? ExecResult{} : closing(r); }

ExecResult checked(const CheckResult& c, ReplyBuffer& out) {
  if (c.more) return {.more = true};
  reply::check(out, c.ready);
  return {};
}

ExecResult got_many(const MultiGetResult& res, ReplyBuffer& out) {
  if (res.more) return {.more = true};
  // As the legacy servers: the values before a missing key go out, then the connection closes.
  for (const auto& v : res.values) reply::value(out, v);
  return refused_or(res);
}

ExecResult waited(const WaitResult& w, ReplyBuffer& out) {
  if (!w.ok()) return closing(w);
  if (w.more) return {.more = true};
  if (w.ready) reply::stop_waiting(out);  // else registered: answered later with exactly one STOP_WAITING
  return {};
}

}  // namespace

void ReplySink::waiter_released(ConnId conn) {
  if (auto* out = output(conn)) reply::stop_waiting(*out);
}

void ReplySink::key_changed(ConnId watcher, KeyChange change, const std::string& key, const BlobPtr& old_value,
                            const BlobPtr& new_value) {
  ReplyBuffer* out = output(watcher);
  if (!out) return;
  const auto type = change == KeyChange::kCreated   ? protocol::WatchResponse::kKeyCreated
                    : change == KeyChange::kDeleted ? protocol::WatchResponse::kKeyDeleted
                                                    : protocol::WatchResponse::kKeyUpdated;
  // 1.13's event: u8 type, key, old value, new value, a missing side empty (sendKeyUpdatesToClients). The
  // values are shared by every watcher's reply, not copied per watcher.
  reply::watch_event(*out, type, key, old_value ? old_value : empty_blob(), new_value ? new_value : empty_blob());
}

std::uint64_t ReplySink::unread_reply_bytes(ConnId conn) {
  const ReplyBuffer* out = output(conn);
  return out ? out->size() : 0;
}

ExecResult step(Keyspace& ks, ReplySink& sink, ConnId conn, const protocol::Request& r) {
  ReplyBuffer* out = sink.output(conn);
  if (!out) return {};
  if (r.command == Command::kWait) return waited(ks.continue_wait(conn, r.keys), *out);
  if (r.command == Command::kCheck) return checked(ks.continue_check(conn, r.keys), *out);
  if (r.command == Command::kMultiGet) return got_many(ks.continue_multi_get(conn, r.keys), *out);
  if (r.command == Command::kMultiSet) {
    auto res = ks.continue_multi_set(conn, r.keys, r.values);
    if (!res.ok()) return closing(res);
    return {.more = res.more};
  }
  return {};
}

ExecResult execute(Keyspace& ks, ReplySink& sink, ConnId conn, const protocol::Request& r) {
  // A new request while a WAIT is still registered means the client stopped waiting: torch 1.13 times
  // out silently (no CANCEL_WAIT) and carries on. A real 1.13 server keeps the registration and later
  // writes a stray 00 that desynchronises the client; we drop it here instead, which is what the client
  // expects. CANCEL_WAIT handles its own registration (and must still reply 01).
  if (r.command != Command::kCancelWait && r.command != Command::kValidate) ks.cancel_wait(conn);
  ReplyBuffer* out = sink.output(conn);
  if (!out) return {};

  switch (r.command) {
    case Command::kValidate:
      if (r.u32 != protocol::kValidationMagic) return closing(fmt::format("VALIDATE with wrong magic 0x{:08X}", r.u32));
      return {};

    case Command::kSet:
      return refused_or(ks.set(conn, r.keys[0], r.values[0]));

    case Command::kAppend:
      return refused_or(ks.append(conn, r.keys[0], r.values[0]));

    case Command::kCompareSet: {
      auto res = ks.compare_set(conn, r.keys[0], r.values[0], r.values[1]);
      if (!res.ok()) return closing(res);
      reply::value(*out, res.value);
      return {};
    }

    case Command::kGet: {
      auto res = ks.get(conn, r.keys[0]);
      if (!res.ok()) return closing(res);
      // Both legacy servers (1.13 and 2.x) fail a GET of a missing key by closing the connection (libuv
      // would send an empty value). Real clients always WAIT first, and the captures expect the close.
      if (!res.value) return closing(fmt::format("GET of missing key '{}'", printable_key(r.keys[0])));
      reply::value(*out, res.value);
      return {};
    }

    case Command::kAdd: {
      // The reply is queued after the wake-ups store() does for other connections; each connection's
      // bytes stay in order, which is all a client sees.
      auto res = ks.add(conn, r.keys[0], r.integer);
      if (!res.ok()) return closing(res);  // no error frame in the protocol: the connection is closed
      reply::integer(*out, res.value);
      return {};
    }

    case Command::kCheck:
      return checked(ks.check(conn, r.keys), *out);

    case Command::kWait:
      return waited(ks.wait(conn, r.keys), *out);

    case Command::kGetNumKeys:
      reply::integer(*out, static_cast<std::int64_t>(ks.num_keys()));
      return {};

    case Command::kWatchKey: {
      auto res = ks.watch(conn, r.keys[0]);
      if (!res.ok()) return closing(res);
      reply::watch_registered(*out);
      return {};
    }

    case Command::kDeleteKey:
      reply::integer(*out, ks.delete_key(r.keys[0]) ? 1 : 0);
      return {};

    case Command::kMultiGet:
      return got_many(ks.multi_get(conn, r.keys), *out);

    case Command::kPeek:
      return got_many(ks.peek(conn, r.keys, r.values[0]), *out);

    case Command::kMultiSet: {
      auto res = ks.multi_set(conn, r.keys, r.values);
      if (!res.ok()) return closing(res);
      return {.more = res.more};
    }

    case Command::kCancelWait:
      ks.cancel_wait(conn);
      // Replied even when nothing was pending (torch26_ops conn3). If the wait had already been answered,
      // the client reads that 00 first and then this 01, as torch's client expects.
      reply::wait_canceled(*out);
      return {};

    case Command::kPing:
      reply::ping(*out, protocol::ping_reply(r.u32, protocol::kServerFeatures));
      return {};

    case Command::kQueuePush:
      return refused_or(ks.queue_push(conn, r.keys[0], r.values[0]));

    case Command::kQueuePop: {
      auto res = ks.queue_pop(conn, r.keys[0]);
      if (!res.ok()) return closing(res);
      reply::queue_pop(*out, res.length, &res.value);
      return {};
    }

    case Command::kQueueLen:
      reply::integer(*out, ks.queue_len(r.keys[0]));
      return {};

    case Command::kListKeys: {
      auto res = ks.list_keys(conn);
      if (!res.ok()) return closing(res);
      reply::list_keys(*out, res.keys);
      return {};
    }

    case Command::kOnClose: {
      auto res = ks.on_close(conn, r.keys[0], r.values[0], r.integer != 0);
      if (!res.ok()) return closing(res);
      reply::integer(*out, res.count);
      return {};
    }

    case Command::kMultiplex:  // a connection's mode: the server's, never the keyspace's
      return closing("MULTIPLEX reached the keyspace");

    case Command::kOnSilence: {
      auto res = ks.on_silence(conn, r.keys[0], r.values[0], r.values[1], std::chrono::milliseconds(r.integer));
      if (!res.ok()) return closing(res);
      reply::integer(*out, res.count);
      return {};
    }

    case Command::kBarrier: {
      auto res = ks.barrier(conn, r.keys[0], r.integer);
      if (!res.ok()) return closing(res);
      if (res.reached) reply::stop_waiting(*out);  // else released later with STOP_WAITING
      return {};
    }
  }
  return closing("unhandled command");
}

}  // namespace ctrun::store::detail
