#include "store/file_store.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "store/local_keyspace.hpp"
#include "store/store_util.hpp"

namespace ctrun::store {
namespace {

// Record kinds of the log.
constexpr char kSet = 'S';
constexpr char kDelete = 'D';
constexpr char kPush = 'P';
constexpr char kPop = 'O';
constexpr auto kPoll = std::chrono::milliseconds(5);

using detail::checked;
using detail::kLocalConn;

struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

bool read_exact(int fd, void* buf, std::size_t n) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    const ssize_t r = ::read(fd, p, n);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

// Replays the log into ks.
void load(int fd, detail::Keyspace& ks) {
  ::lseek(fd, 0, SEEK_SET);
  for (;;) {
    char op;
    std::uint32_t klen = 0;
    std::uint32_t vlen = 0;
    if (!read_exact(fd, &op, 1) || !read_exact(fd, &klen, 4)) break;
    std::string key(klen, '\0');
    if (!read_exact(fd, key.data(), klen) || !read_exact(fd, &vlen, 4)) break;
    std::string value(vlen, '\0');
    if (!read_exact(fd, value.data(), vlen)) break;
    switch (op) {
      case kSet:
        ks.set(kLocalConn, key, value);
        break;
      case kDelete:
        ks.delete_key(key);
        break;
      case kPush:
        ks.queue_push(kLocalConn, key, value);
        break;
      case kPop:
        ks.queue_pop(kLocalConn, key);
        break;
      default:
        break;
    }
  }
}

// What a command changed, appended to the log.
class Log {
 public:
  Log(int fd, const std::string& path, const detail::Keyspace& ks) : fd_(fd), path_(path), ks_(ks) {}
  // key's value as it is now (a set record, or a delete record if it is gone).
  void key(const std::string& k) {
    auto v = ks_.value(k);
    write(v ? kSet : kDelete, k, v ? std::string_view(*v) : std::string_view());
  }
  void push(const std::string& k, std::string_view v) { write(kPush, k, v); }
  void pop(const std::string& k) { write(kPop, k, {}); }

 private:
  void write(char op, const std::string& key, std::string_view value) {
    std::string rec(1, op);
    const auto klen = static_cast<std::uint32_t>(key.size());
    const auto vlen = static_cast<std::uint32_t>(value.size());
    rec.append(reinterpret_cast<const char*>(&klen), 4).append(key);
    rec.append(reinterpret_cast<const char*>(&vlen), 4).append(value);
    ::lseek(fd_, 0, SEEK_END);
    if (::write(fd_, rec.data(), rec.size()) != static_cast<ssize_t>(rec.size())) {
      throw StoreError("file store: cannot write " + path_ + ": " + std::strerror(errno));
    }
  }
  int fd_;
  const std::string& path_;
  const detail::Keyspace& ks_;
};

}  // namespace

FileStore::FileStore(std::string path, Duration timeout) : path_(std::move(path)), timeout_(timeout) {
  Fd f{::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600)};
  if (f.fd < 0) throw StoreError("file store: cannot open " + path_ + ": " + std::strerror(errno));
}

template <class Fn>
auto FileStore::locked(Fn&& fn) {
  std::lock_guard guard(mutex_);
  Fd f{::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600)};
  if (f.fd < 0) throw StoreError("file store: cannot open " + path_ + ": " + std::strerror(errno));
  if (::flock(f.fd, LOCK_EX) != 0) throw StoreError("file store: cannot lock " + path_);
  detail::LocalKeyspace local;
  load(f.fd, local.keyspace());
  Log log(f.fd, path_, local.keyspace());
  return fn(local.keyspace(), log);  // the lock goes with the fd
}

void FileStore::set(const std::string& key, std::string_view value) {
  locked([&](detail::Keyspace& ks, Log& log) {
    checked(ks.set(kLocalConn, key, value));
    log.key(key);
    return 0;
  });
}

std::string FileStore::get(const std::string& key) {
  wait({key}, timeout_);
  return locked([&](detail::Keyspace& ks, Log&) {
    auto r = ks.get(kLocalConn, key);
    checked(r);
    if (!r.value)
      throw StoreError("file store: GET of key '" + printable_key(key) + "', which is a queue, not a value");
    return r.value->bytes;
  });
}

std::string FileStore::compare_set(const std::string& key, std::string_view expected, std::string_view desired) {
  return locked([&](detail::Keyspace& ks, Log& log) {
    auto r = ks.compare_set(kLocalConn, key, expected, desired);
    checked(r);
    if (r.stored) log.key(key);
    return r.value->bytes;
  });
}

std::int64_t FileStore::add(const std::string& key, std::int64_t delta) {
  return locked([&](detail::Keyspace& ks, Log& log) {
    const auto v = checked(ks.add(kLocalConn, key, delta)).value;
    log.key(key);
    return v;
  });
}

bool FileStore::check(const std::vector<std::string>& keys) {
  return locked([&](detail::Keyspace& ks, Log&) { return ks.check(keys); });
}

void FileStore::wait(const std::vector<std::string>& keys, Duration timeout) {
  const auto deadline = Clock::now() + timeout;
  while (!check(keys)) {
    if (Clock::now() >= deadline) throw TimeoutError(wait_timeout_message(keys, timeout));
    std::this_thread::sleep_for(kPoll);
  }
}

std::int64_t FileStore::num_keys() {
  return locked([](detail::Keyspace& ks, Log&) { return static_cast<std::int64_t>(ks.num_keys()); });
}

bool FileStore::delete_key(const std::string& key) {
  return locked([&](detail::Keyspace& ks, Log& log) {
    if (!ks.delete_key(key)) return false;
    log.key(key);
    return true;
  });
}

void FileStore::append(const std::string& key, std::string_view value) {
  locked([&](detail::Keyspace& ks, Log& log) {
    checked(ks.append(kLocalConn, key, value));
    log.key(key);
    return 0;
  });
}

std::vector<std::string> FileStore::multi_get(const std::vector<std::string>& keys) {
  wait(keys, timeout_);
  return locked([&](detail::Keyspace& ks, Log&) { return detail::run_multi_get(ks, keys); });
}

void FileStore::multi_set(const std::vector<std::string>& keys, const std::vector<std::string>& values) {
  check_multi_set_sizes(keys, values);
  locked([&](detail::Keyspace& ks, Log& log) {
    detail::run_multi_set(ks, keys, values);
    for (const auto& k : keys) log.key(k);
    return 0;
  });
}

void FileStore::queue_push(const std::string& key, std::string_view value) {
  locked([&](detail::Keyspace& ks, Log& log) {
    checked(ks.queue_push(kLocalConn, key, value));
    log.push(key, value);
    return 0;
  });
}

std::optional<std::string> FileStore::queue_pop(const std::string& key, bool block) {
  const auto deadline = Clock::now() + timeout_;
  for (;;) {
    auto v = locked([&](detail::Keyspace& ks, Log& log) -> std::optional<std::string> {
      auto r = ks.queue_pop(kLocalConn, key);
      checked(r);
      if (!r.value) return std::nullopt;
      log.pop(key);
      return r.value->bytes;
    });
    if (v || !block) return v;
    if (Clock::now() >= deadline) throw TimeoutError(wait_timeout_message({key}, timeout_));
    std::this_thread::sleep_for(kPoll);
  }
}

std::int64_t FileStore::queue_len(const std::string& key) {
  return locked([&](detail::Keyspace& ks, Log&) { return ks.queue_len(key); });
}

std::vector<std::string> FileStore::list_keys() {
  return locked([](detail::Keyspace& ks, Log&) { return ks.keys(); });
}

void FileStore::barrier(const std::string& key, std::int64_t world_size, Duration timeout) {
  locked([&](detail::Keyspace& ks, Log& log) {
    checked(ks.barrier(kLocalConn, key, world_size, /*register_waiter=*/false));
    log.key(key);
    return 0;
  });
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    const std::int64_t arrived = locked([&](detail::Keyspace& ks, Log&) -> std::int64_t {
      auto v = ks.value(key);
      return v ? parse_stoll(*v).value_or(0) : world_size;  // deleted meanwhile: released
    });
    if (arrived >= world_size) return;
    if (Clock::now() >= deadline) throw TimeoutError(wait_timeout_message({key}, timeout));
    std::this_thread::sleep_for(kPoll);
  }
}

}  // namespace ctrun::store
