#include "agent/process/file_timer.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <nlohmann/json.hpp>

#include "agent/base/event_log.hpp"
#include "agent/base/signal_names.hpp"
#include "agent/logs/line_splitter.hpp"
#include "agent/process/worker_group.hpp"
#include "common/log.hpp"
#include "common/worker_env.hpp"

namespace ctrun::agent {
namespace {

// torch's server wakes every max_interval = 0.1 s; a deadline is acted on within that of passing.
constexpr auto kWatchInterval = std::chrono::milliseconds(100);
// A request is at most PIPE_BUF bytes (the client refuses larger): a longer line is garbage, dropped.
constexpr std::size_t kMaxLine = 4096;

double epoch_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

std::optional<FileTimerRequest> parse_file_timer_request(const std::string& line, std::string* why) {
  auto fail = [&](std::string what) -> std::optional<FileTimerRequest> {
    if (why != nullptr) *why = std::move(what);
    return std::nullopt;
  };
  nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return fail("not a JSON object");
  if (!j.contains("version") || !j["version"].is_number_integer() || j["version"].get<int>() != 1) {
    return fail("not a version 1 request");
  }
  if (!j.contains("pid") || !j["pid"].is_number_integer()) return fail("no integer pid");
  if (!j.contains("scope_id") || !j["scope_id"].is_string()) return fail("no scope_id");
  if (!j.contains("expiration_time") || !j["expiration_time"].is_number()) return fail("no expiration_time");
  FileTimerRequest r;
  r.pid = static_cast<pid_t>(j["pid"].get<long long>());
  r.scope_id = j["scope_id"].get<std::string>();
  r.expiration_time = j["expiration_time"].get<double>();
  if (j.contains("signal") && j["signal"].is_number_integer()) r.signal = j["signal"].get<int>();
  if (r.pid <= 0) return fail("pid must be positive");
  return r;
}

void FileTimerTable::apply(const FileTimerRequest& request) {
  const auto key = std::make_pair(request.pid, request.scope_id);
  if (request.expiration_time < 0) {
    timers_.erase(key);
  } else {
    timers_[key] = request;
  }
}

std::vector<ExpiredTimer> FileTimerTable::expire(double now) {
  std::map<pid_t, std::vector<const FileTimerRequest*>> by_pid;
  for (const auto& [key, t] : timers_) {
    if (t.expiration_time <= now) by_pid[key.first].push_back(&t);
  }
  std::vector<ExpiredTimer> out;
  for (auto& [pid, timers] : by_pid) {
    std::sort(timers.begin(), timers.end(),
              [](const auto* a, const auto* b) { return a->expiration_time < b->expiration_time; });
    ExpiredTimer e;
    e.pid = pid;
    e.scope_id = timers.front()->scope_id;
    e.overdue = now - timers.front()->expiration_time;
    for (const auto* t : timers) {
      if (t->signal > 0) {
        e.scope_id = t->scope_id;
        e.signal = t->signal;
        e.overdue = now - t->expiration_time;
        break;
      }
    }
    out.push_back(std::move(e));
  }
  for (const auto& e : out) forget(e.pid);
  return out;
}

std::optional<double> FileTimerTable::next_deadline() const {
  std::optional<double> next;
  for (const auto& [key, t] : timers_) {
    if (!next || t.expiration_time < *next) next = t.expiration_time;
  }
  return next;
}

void FileTimerTable::forget(pid_t pid) {
  for (auto it = timers_.begin(); it != timers_.end();) {
    it = it->first.first == pid ? timers_.erase(it) : std::next(it);
  }
}

struct FileTimerServer::Impl : std::enable_shared_from_this<Impl> {
  Impl(boost::asio::io_context& io, std::string p, Callbacks cb)
      : path(std::move(p)), callbacks(std::move(cb)), reader(io), timer(io) {}

  std::string path;
  Callbacks callbacks;
  boost::asio::posix::stream_descriptor reader;
  boost::asio::steady_timer timer;
  int keep_open = -1;  // our own write end: the FIFO never reads EOF between clients
  std::array<char, 4096> buf{};
  LineSplitter lines{kMaxLine};
  FileTimerTable table;
  std::set<pid_t> workers;
  bool stopped = false;

  void warn(const std::string& what) {
    if (callbacks.warn) callbacks.warn(what);
  }

  void read() {
    reader.async_read_some(boost::asio::buffer(buf), [self = shared_from_this()](auto ec, std::size_t n) {
      if (self->stopped) return;
      if (ec) {
        if (ec != boost::asio::error::operation_aborted) self->warn("reading the timer FIFO: " + ec.message());
        return;
      }
      self->lines.feed(std::string_view(self->buf.data(), n), [&](std::string_view line) { self->request(line); });
      self->read();
    });
  }

  void request(std::string_view raw) {
    std::string line(raw);
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
    if (line.empty()) return;
    std::string why;
    auto r = parse_file_timer_request(line, &why);
    if (!r) {
      warn("file timer: dropped a request (" + why + "): " + line.substr(0, 200));
      return;
    }
    if (!workers.count(r->pid)) {
      warn("file timer: dropped a request for pid " + std::to_string(r->pid) + ", not a worker of this agent");
      return;
    }
    table.apply(*r);
  }

  void watch() {
    timer.expires_after(kWatchInterval);
    timer.async_wait([self = shared_from_this()](auto ec) {
      if (ec || self->stopped) return;
      for (const auto& e : self->table.expire(epoch_now())) {
        if (e.signal > 0 && self->workers.count(e.pid)) ::kill(e.pid, e.signal);
        if (self->callbacks.expired) self->callbacks.expired(e);
      }
      self->watch();
    });
  }
};

FileTimerServer::FileTimerServer(boost::asio::io_context& io, std::string path, Callbacks callbacks)
    : impl_(std::make_shared<Impl>(io, std::move(path), std::move(callbacks))) {
  const std::string& p = impl_->path;
  ::unlink(p.c_str());
  if (::mkfifo(p.c_str(), 0600) != 0) {
    throw std::runtime_error("cannot create the file timer FIFO " + p + ": " + std::strerror(errno) +
                             " (set TORCHELASTIC_TIMER_FILE to a writable path, or unset "
                             "TORCHELASTIC_ENABLE_FILE_TIMER)");
  }
  const int rd = ::open(p.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  const int wr = rd >= 0 ? ::open(p.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC) : -1;
  if (rd < 0 || wr < 0) {
    const std::string err = std::strerror(errno);
    if (rd >= 0) ::close(rd);
    ::unlink(p.c_str());
    throw std::runtime_error("cannot open the file timer FIFO " + p + ": " + err);
  }
  impl_->keep_open = wr;
  impl_->reader.assign(rd);
  impl_->read();
  impl_->watch();
}

FileTimerServer::~FileTimerServer() {
  impl_->stopped = true;
  boost::system::error_code ignored;
  impl_->timer.cancel();
  impl_->reader.close(ignored);
  if (impl_->keep_open >= 0) ::close(impl_->keep_open);
  ::unlink(impl_->path.c_str());
}

const std::string& FileTimerServer::path() const { return impl_->path; }

void FileTimerServer::set_workers(std::set<pid_t> pids) {
  // A new attempt: the old workers' timers go with them.
  impl_->table.clear();
  impl_->workers = std::move(pids);
}

void FileTimerServer::set_expired(std::function<void(const ExpiredTimer&)> expired) {
  impl_->callbacks.expired = std::move(expired);
}

std::string default_file_timer_path() {
  std::random_device rd;
  std::array<unsigned, 4> w{rd(), rd(), rd(), rd()};
  char uuid[64];
  std::snprintf(uuid, sizeof uuid, "%08x-%04x-4%03x-%04x-%04x%08x", w[0], w[1] & 0xffff, (w[1] >> 16) & 0xfff,
                0x8000 | (w[2] & 0x3fff), w[2] >> 16, w[3]);
  return std::string("/tmp/watchdog_timer_") + uuid;
}

std::unique_ptr<FileTimerServer> attach_file_timer(
    boost::asio::io_context& io, const std::function<std::optional<std::string>(const std::string&)>& env,
    WorkerGroup& group, EventLog& events) {
  auto log = ctrun::log::get("agent");
  const auto given = env(worker_env::kTimerFile);
  const bool enabled = env(worker_env::kEnableFileTimer).value_or("") == "1";
  if (!enabled) {
    if (given) {
      WorkerHooks hooks;
      hooks.before_start = [path = *given](const Worker&, std::map<std::string, std::string>& e) {
        e[worker_env::kTimerFile] = path;
      };
      group.add_hooks(std::move(hooks));
    }
    return nullptr;
  }
  const std::string path = given && !given->empty() ? *given : default_file_timer_path();
  FileTimerServer::Callbacks cb;
  cb.warn = [log](const std::string& what) { log->warn("{}", what); };
  auto server = std::make_unique<FileTimerServer>(io, path, std::move(cb));
  FileTimerServer* raw = server.get();
  // The expired callback names the worker: set after the group exists, reading its current records.
  WorkerGroup* g = &group;
  raw->set_expired([log, g, &events](const ExpiredTimer& e) {
    const Worker* w = nullptr;
    for (const auto& x : g->workers()) {
      if (x.pid == e.pid) w = &x;
    }
    const int local_rank = w ? w->local_rank : -1;
    const int rank = w ? w->global_rank : -1;
    if (e.signal > 0) {
      log->error(
          "worker pid {} (local_rank {}, rank {}) overstayed its timer '{}' by {:.2f} s: sent {} (file timer, "
          "TORCHELASTIC_ENABLE_FILE_TIMER)",
          e.pid, local_rank, rank, e.scope_id, e.overdue, signal_name(e.signal));
    } else {
      log->error("worker pid {} (local_rank {}, rank {}) overstayed its timer '{}' by {:.2f} s (no signal asked)",
                 e.pid, local_rank, rank, e.scope_id, e.overdue);
    }
    events.emit(Event::kFileTimerExpired, {{"pid", e.pid},
                                           {"local_rank", local_rank},
                                           {"rank", rank},
                                           {"scope_id", e.scope_id},
                                           {"signal", e.signal},
                                           {"overdue_s", e.overdue}});
  });
  WorkerHooks hooks;
  hooks.before_start = [path](const Worker&, std::map<std::string, std::string>& e) {
    e[worker_env::kTimerFile] = path;
  };
  hooks.after_start = [raw](const std::vector<Worker>& workers) {
    std::set<pid_t> pids;
    for (const auto& w : workers) {
      if (w.pid > 0) pids.insert(w.pid);
    }
    raw->set_workers(std::move(pids));
  };
  group.add_hooks(std::move(hooks));
  log->info("serving torchrun's file timer at {} (TORCHELASTIC_ENABLE_FILE_TIMER=1)", path);
  return server;
}

}  // namespace ctrun::agent
