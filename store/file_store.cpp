#include "store/file_store.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "store/store_util.hpp"

namespace ctrun::store {
namespace {

constexpr char kSet = 'S';
constexpr char kDelete = 'D';
constexpr auto kPoll = std::chrono::milliseconds(5);

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

}  // namespace

FileStore::FileStore(std::string path, Duration timeout) : path_(std::move(path)), timeout_(timeout) {
  Fd f{::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600)};
  if (f.fd < 0) throw StoreError("file store: cannot open " + path_ + ": " + std::strerror(errno));
}

FileStore::Map FileStore::load(int fd) {
  Map map;
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
    if (op == kSet) {
      map[key] = std::move(value);
    } else {
      map.erase(key);
    }
  }
  return map;
}

void FileStore::write_record(int fd, char op, const std::string& key, std::string_view value) {
  std::string rec(1, op);
  const auto klen = static_cast<std::uint32_t>(key.size());
  const auto vlen = static_cast<std::uint32_t>(value.size());
  rec.append(reinterpret_cast<const char*>(&klen), 4).append(key);
  rec.append(reinterpret_cast<const char*>(&vlen), 4).append(value);
  ::lseek(fd, 0, SEEK_END);
  if (::write(fd, rec.data(), rec.size()) != static_cast<ssize_t>(rec.size())) {
    throw StoreError("file store: cannot write " + path_ + ": " + std::strerror(errno));
  }
}

template <class Fn>
auto FileStore::locked(Fn&& fn) {
  std::lock_guard guard(mutex_);
  Fd f{::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600)};
  if (f.fd < 0) throw StoreError("file store: cannot open " + path_ + ": " + std::strerror(errno));
  if (::flock(f.fd, LOCK_EX) != 0) throw StoreError("file store: cannot lock " + path_);
  Map map = load(f.fd);
  auto set = [&](const std::string& k, std::string_view v) {
    write_record(f.fd, kSet, k, v);
    map[k] = std::string(v);
  };
  auto erase = [&](const std::string& k) {
    write_record(f.fd, kDelete, k, {});
    map.erase(k);
  };
  return fn(map, set, erase);  // the lock goes with the fd
}

void FileStore::set(const std::string& key, std::string_view value) {
  locked([&](Map&, auto& set, auto&) {
    set(key, value);
    return 0;
  });
}

std::string FileStore::get(const std::string& key) {
  wait({key}, timeout_);
  return locked([&](Map& m, auto&, auto&) { return m.at(key); });
}

std::string FileStore::compare_set(const std::string& key, std::string_view expected, std::string_view desired) {
  return locked([&](Map& m, auto& set, auto&) -> std::string {
    auto it = m.find(key);
    if (it == m.end()) {
      if (expected.empty()) {
        set(key, desired);
        return std::string(desired);
      }
      return std::string(expected);
    }
    if (it->second == expected) {
      set(key, desired);
      return std::string(desired);
    }
    return it->second;
  });
}

std::int64_t FileStore::add(const std::string& key, std::int64_t delta) {
  return locked([&](Map& m, auto& set, auto&) {
    auto it = m.find(key);
    const std::int64_t v = add_result(key, it == m.end() ? nullptr : &it->second, delta);
    set(key, std::to_string(v));
    return v;
  });
}

bool FileStore::check(const std::vector<std::string>& keys) {
  return locked([&](Map& m, auto&, auto&) {
    for (const auto& k : keys) {
      if (!m.count(k)) return false;
    }
    return true;
  });
}

void FileStore::wait(const std::vector<std::string>& keys, Duration timeout) {
  const auto deadline = Clock::now() + timeout;
  while (!check(keys)) {
    if (Clock::now() >= deadline) throw TimeoutError(wait_timeout_message(keys, timeout));
    std::this_thread::sleep_for(kPoll);
  }
}

std::int64_t FileStore::num_keys() {
  return locked([](Map& m, auto&, auto&) { return static_cast<std::int64_t>(m.size()); });
}

bool FileStore::delete_key(const std::string& key) {
  return locked([&](Map& m, auto&, auto& erase) {
    if (!m.count(key)) return false;
    erase(key);
    return true;
  });
}

void FileStore::append(const std::string& key, std::string_view value) {
  locked([&](Map& m, auto& set, auto&) {
    set(key, m[key] + std::string(value));
    return 0;
  });
}

std::vector<std::string> FileStore::multi_get(const std::vector<std::string>& keys) {
  wait(keys, timeout_);
  return locked([&](Map& m, auto&, auto&) {
    std::vector<std::string> out;
    for (const auto& k : keys) out.push_back(m.at(k));
    return out;
  });
}

void FileStore::multi_set(const std::vector<std::string>& keys, const std::vector<std::string>& values) {
  check_multi_set_sizes(keys, values);
  locked([&](Map&, auto& set, auto&) {
    for (std::size_t i = 0; i < keys.size(); ++i) set(keys[i], values[i]);
    return 0;
  });
}

// Queues are stored as one key per element under "<key>\x01<index>" with head/tail counters.
void FileStore::queue_push(const std::string& key, std::string_view value) {
  locked([&](Map& m, auto& set, auto&) {
    const std::string tail_key = key + "\x01tail";
    const std::int64_t tail = m.count(tail_key) ? std::stoll(m[tail_key]) : 0;
    set(key + "\x01" + std::to_string(tail), value);
    set(tail_key, std::to_string(tail + 1));
    return 0;
  });
}

std::optional<std::string> FileStore::queue_pop(const std::string& key, bool block) {
  const auto deadline = Clock::now() + timeout_;
  for (;;) {
    auto v = locked([&](Map& m, auto& set, auto& erase) -> std::optional<std::string> {
      const std::string head_key = key + "\x01head";
      const std::int64_t head = m.count(head_key) ? std::stoll(m[head_key]) : 0;
      const std::string item = key + "\x01" + std::to_string(head);
      auto it = m.find(item);
      if (it == m.end()) return std::nullopt;
      std::string out = it->second;
      erase(item);
      set(head_key, std::to_string(head + 1));
      return out;
    });
    if (v || !block) return v;
    if (Clock::now() >= deadline) throw TimeoutError(wait_timeout_message({key}, timeout_));
    std::this_thread::sleep_for(kPoll);
  }
}

std::int64_t FileStore::queue_len(const std::string& key) {
  return locked([&](Map& m, auto&, auto&) -> std::int64_t {
    const std::int64_t head = m.count(key + "\x01head") ? std::stoll(m[key + "\x01head"]) : 0;
    const std::int64_t tail = m.count(key + "\x01tail") ? std::stoll(m[key + "\x01tail"]) : 0;
    return tail - head;
  });
}

std::vector<std::string> FileStore::list_keys() {
  return locked([](Map& m, auto&, auto&) {
    std::vector<std::string> out;
    for (const auto& [k, v] : m) out.push_back(k);
    return out;
  });
}

void FileStore::barrier(const std::string& key, std::int64_t world_size, Duration timeout) {
  add(key, 1);
  const auto deadline = Clock::now() + timeout;
  for (;;) {
    const std::int64_t arrived = add(key, 0);
    if (arrived >= world_size) return;
    if (Clock::now() >= deadline) throw TimeoutError(wait_timeout_message({key}, timeout));
    std::this_thread::sleep_for(kPoll);
  }
}

}  // namespace ctrun::store
