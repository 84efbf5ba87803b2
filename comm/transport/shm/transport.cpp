#include "comm/transport/shm/transport.hpp"

#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <thread>

#include "comm/transport/shm/peer_liveness.hpp"
#include "comm/transport/shm/ring.hpp"
#include "common/hostname.hpp"

namespace ctrun::comm::transport::shm {
namespace {

// Iterations of the brief spin before yielding, then sleeping. Spinning longer starves peers when ranks
// outnumber cores; a yield hands the core to the peer that is most likely about to produce our data.
constexpr int kSpinIterations = 64;
constexpr int kYields = 2;
constexpr auto kLivenessSlice = std::chrono::milliseconds(100);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

void futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t expected, std::chrono::milliseconds timeout) {
  timespec ts{static_cast<time_t>(timeout.count() / 1000), static_cast<long>((timeout.count() % 1000) * 1000000)};
  // Not FUTEX_PRIVATE: the word lives in memory shared between processes.
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wake_all(std::atomic<std::uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
}

// CPUs this process may run on (its affinity mask, as a container's cpuset limits it).
int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

std::string read_first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string link_target(const char* path) {
  char buf[256];
  const ssize_t n = readlink(path, buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
}

class ShmTransport final : public Transport, public SharedWorkspace {
 public:
  ShmTransport(std::shared_ptr<store::Store> store, int rank, int size, Options options)
      : rank_(rank),
        size_(size),
        rank_names_(options.rank_names),
        ring_bytes_(options.ring_bytes),
        slot_bytes_(options.slot_bytes),
        slots_(std::clamp(options.slots, 1, kMaxSlots)),
        stream_bytes_(options.stream_bytes),
        pipeline_bytes_(options.pipeline_bytes),
        oversubscribed_(size > (options.cores > 0 ? options.cores : usable_cpus())),
        segments_(static_cast<std::size_t>(size), nullptr),
        pids_(static_cast<std::size_t>(size), 0),
        liveness_(size) {
    try {
      create_own_segment();
      store->set("shm/" + std::to_string(rank_), name_);
      for (int peer = 0; peer < size_; ++peer) {
        if (peer != rank_) map_peer(*store, peer, options.timeout);
      }
      own()->peer_reads_ok = options.peer_reads && probe_peer_reads() ? 1 : 0;
      // Once everyone mapped everything the names can go: the mappings stay, /dev/shm is clean.
      store->barrier("shm/mapped", size_, options.timeout);
      unlink_own();
      peer_reads_ = true;
      for (int r = 0; r < size_; ++r) {
        if (!static_cast<SegmentHeader*>(segments_[static_cast<std::size_t>(r)])->peer_reads_ok) peer_reads_ = false;
      }
    } catch (...) {
      release();
      throw;
    }
  }

  ~ShmTransport() override { release(); }

  std::string_view name() const override { return "shm"; }
  bool connected(int) const override { return true; }

  std::size_t write_some(int peer, const void* data, std::size_t n) override {
    check_aborted();
    void* seg = segments_[static_cast<std::size_t>(peer)];
    RingHeader* ring = ring_header(seg, rank_, ring_bytes_);
    const std::uint64_t head = ring->head.load(std::memory_order_relaxed);
    const std::uint64_t tail = ring->tail.load(std::memory_order_acquire);
    const std::size_t m = std::min<std::size_t>(n, ring_bytes_ - static_cast<std::size_t>(head - tail));
    if (m == 0) return 0;
    char* base = ring_data(seg, rank_, ring_bytes_);
    const std::size_t off = static_cast<std::size_t>(head) & (ring_bytes_ - 1);
    const std::size_t first = std::min(m, ring_bytes_ - off);
    std::memcpy(base + off, data, first);
    if (m > first) std::memcpy(base, static_cast<const char*>(data) + first, m - first);
    ring->head.store(head + m, std::memory_order_release);
    ring_doorbell(peer);
    return m;
  }

  std::size_t read_some(int peer, void* data, std::size_t n) override {
    check_aborted();
    void* seg = segments_[static_cast<std::size_t>(rank_)];
    RingHeader* ring = ring_header(seg, peer, ring_bytes_);
    const std::uint64_t tail = ring->tail.load(std::memory_order_relaxed);
    const std::uint64_t head = ring->head.load(std::memory_order_acquire);
    const std::size_t m = std::min<std::size_t>(n, static_cast<std::size_t>(head - tail));
    if (m == 0) return 0;
    const char* base = ring_data(seg, peer, ring_bytes_);
    const std::size_t off = static_cast<std::size_t>(tail) & (ring_bytes_ - 1);
    const std::size_t first = std::min(m, ring_bytes_ - off);
    std::memcpy(data, base + off, first);
    if (m > first) std::memcpy(static_cast<char*>(data) + first, base, m - first);
    ring->tail.store(tail + m, std::memory_order_release);
    ring_doorbell(peer);  // the writer may be waiting for space
    return m;
  }

  std::uint64_t event_token() override { return own()->doorbell.load(std::memory_order_seq_cst); }

  void wait_event(std::uint64_t token, Clock::time_point until, const std::vector<int>& want_read,
                  const std::vector<int>& want_write) override {
    check_aborted();
    SegmentHeader* h = own();
    const auto expected = static_cast<std::uint32_t>(token);
    for (int i = 0; i < kSpinIterations; ++i) {
      if (h->doorbell.load(std::memory_order_acquire) != expected) return;
      cpu_relax();
    }
    for (int i = 0; i < kYields; ++i) {
      sched_yield();
      if (h->doorbell.load(std::memory_order_acquire) != expected) return;
    }
    if (Clock::now() >= until) return;
    sleep_on_doorbell(h, expected, until);
    if (h->doorbell.load(std::memory_order_acquire) != expected) return;
    check_aborted();
    if (Clock::now() - last_liveness_ >= kLivenessSlice) {
      last_liveness_ = Clock::now();
      for (int peer : want_read) check_alive(peer);
      for (int peer : want_write) check_alive(peer);
    }
  }

  void interrupt() override { ring_doorbell(rank_); }

  SharedWorkspace* workspace() override { return this; }
  std::size_t part_bytes() const override { return slot_bytes_; }
  std::size_t stream_bytes() const override { return stream_bytes_; }
  char* part(int r, int which) override {
    return static_cast<char*>(segments_[static_cast<std::size_t>(r)]) + rings_end(size_, ring_bytes_) +
           static_cast<std::size_t>(which) * slot_bytes_;
  }

  // --- pipelined use ---
  int slots() const override { return slots_; }
  std::size_t slot_bytes() const override { return slot_bytes_; }
  char* slot(int r, std::uint64_t piece) override {
    return static_cast<char*>(segments_[static_cast<std::size_t>(r)]) +
           slots_begin(size_, ring_bytes_, kParts, slot_bytes_) +
           static_cast<std::size_t>(piece % static_cast<std::uint64_t>(slots_)) * slot_bytes_;
  }
  std::uint64_t take_pieces(std::uint64_t count) override {
    const std::uint64_t first = pieces_;
    pieces_ += count;
    return first;
  }
  void set_slot_signature(std::uint64_t piece, std::uint64_t signature) override {
    own()->slot_signature[piece % static_cast<std::uint64_t>(slots_)].store(signature, std::memory_order_relaxed);
  }
  std::uint64_t slot_signature(int r, std::uint64_t piece) const override {
    return header(r)->slot_signature[piece % static_cast<std::uint64_t>(slots_)].load(std::memory_order_relaxed);
  }
  std::uint64_t progress(int r, Counter c) const override {
    return header(r)->progress[c].value.load(std::memory_order_acquire);
  }
  std::uint64_t others_progress(Counter c) const override { return min_progress_except(rank_, c); }

  bool oversubscribed() const override { return oversubscribed_; }
  std::size_t pipeline_bytes() const override { return pipeline_bytes_; }

  void publish(Counter c, std::uint64_t value) override {
    auto& mine = own()->progress[c].value;
    if (mine.load(std::memory_order_relaxed) >= value) return;
    mine.store(value, std::memory_order_seq_cst);
    unflushed_ |= 1u << c;
    flush_wakes();
  }

  // Wakes the peers whose registered wait the counters just published satisfy (see wait_any for why nothing is
  // lost). With more ranks than cores, every peer waiting on that counter instead, satisfied or not: woken
  // early, they spin and yield into the last arrival instead of all starting from a futex sleep at once (A/B
  // runs with 4 and 8 ranks on 2 cores, docs/benchmarks.md; the same finding as for the barrier below).
  void flush_wakes() {
    if (!unflushed_) return;
    for (int q = 0; q < size_; ++q) {
      if (q == rank_) continue;
      SegmentHeader* h = header(q);
      for (int c = 0; c < kCounters; ++c) {
        if (!(unflushed_ & (1u << c))) continue;
        const std::uint64_t want = h->want_value[c].load(std::memory_order_seq_cst);
        if (want == 0) continue;
        const int who = h->want_rank[c].load(std::memory_order_seq_cst);
        const auto counter = static_cast<Counter>(c);
        if (oversubscribed_ || (who == rank_ && progress(rank_, counter) >= want) ||
            (who < 0 && min_progress_except(q, counter) >= want)) {
          ring_doorbell(q);
          break;
        }
      }
    }
    unflushed_ = 0;
  }

  [[noreturn]] void mismatch(int r) const override {
    throw PeerError("mismatched collectives: rank " + named(r) +
                    " entered a shared-memory collective with a different op, dtype or size than rank " +
                    std::to_string(rank_) +
                    "; every rank must issue the same collectives with the same sizes in the same order");
  }

  // Sleeping without lost wake-ups: register the wants in the own header, then re-check, then futex_wait on
  // the doorbell with the token taken before registering. A publisher stores its counter, then reads the
  // registration (both seq_cst): either the re-check sees the new counter or the publisher sees the
  // registration and rings. Spurious wake-ups (messages, aborts) just loop.
  void wait_any(const std::vector<Want>& wants, Clock::time_point deadline) override {
    if (any_holds(wants)) return;
    // Spin briefly, then yield (a peer we wait for may be runnable on this core), then sleep.
    for (int i = 0; i < kSpinIterations; ++i) {
      cpu_relax();
      if (any_holds(wants)) return;
    }
    for (int i = 0; i < kYields; ++i) {
      sched_yield();
      if (any_holds(wants)) return;
    }
    SegmentHeader* h = own();
    note_wait(wants.size() == 1 ? wants[0].rank : -1);
    for (;;) {
      check_aborted();
      const std::uint32_t token = h->doorbell.load(std::memory_order_seq_cst);
      for (const Want& w : wants) {
        h->want_rank[w.counter].store(w.rank, std::memory_order_seq_cst);
        h->want_value[w.counter].store(w.value, std::memory_order_seq_cst);
      }
      const bool ready = any_holds(wants);
      if (!ready && Clock::now() < deadline) sleep_on_doorbell(h, token, deadline);
      for (const Want& w : wants) h->want_value[w.counter].store(0, std::memory_order_seq_cst);
      if (ready || any_holds(wants)) return;
      check_aborted();
      if (Clock::now() >= deadline) {
        throw TimeoutError("shared-memory collective timed out: rank(s) " + behind(wants) +
                           " did not get this far (a stalled or much slower rank)");
      }
      if (Clock::now() - last_liveness_ >= kLivenessSlice) {
        last_liveness_ = Clock::now();
        for (const Want& w : wants) {
          for (int r = 0; r < size_; ++r) {
            if (r != rank_ && (w.rank < 0 || w.rank == r)) check_alive(r);
          }
        }
      }
    }
  }
  int next_part() override { return static_cast<int>(part_counter_++ % kParts); }

  bool peer_reads() const override { return peer_reads_; }

  void read_peer(int r, std::uint64_t remote, void* local, std::size_t bytes) override {
    const int pid = pids_[static_cast<std::size_t>(r)];
    if (pid == getpid()) {  // ranks as threads of one process
      if (bytes) std::memcpy(local, reinterpret_cast<const void*>(remote), bytes);
      return;
    }
    auto* out = static_cast<char*>(local);
    while (bytes > 0) {
      iovec l{out, bytes};
      iovec rv{reinterpret_cast<void*>(remote), bytes};
      const ssize_t n = process_vm_readv(pid, &l, 1, &rv, 1, 0);
      if (n <= 0) {
        if (n < 0 && errno == EINTR) continue;
        throw PeerError("comm shm: reading rank " + std::to_string(r) + "'s buffer (pid " + std::to_string(pid) +
                        ") failed: " + (n < 0 ? std::strerror(errno) : "no bytes") + " (did it exit?)");
      }
      out += n;
      remote += static_cast<std::uint64_t>(n);
      bytes -= static_cast<std::size_t>(n);
    }
  }

  void barrier(Clock::time_point deadline, std::uint64_t signature) override {
    const std::uint64_t gen = ++barrier_gen_;
    own()->barrier_signature[gen % 2].store(signature, std::memory_order_relaxed);
    // Every arrival rings every peer, not only the last one: A/B runs with "only the rank that sees all arrivals
    // rings" (fewer futex wake-ups) were 1.2-3x slower for all_reduce with 8 ranks on 2 cores: ranks woken early
    // spin and yield into the barrier's last steps instead of all waking at once (docs/benchmarks.md).
    own()->barrier_arrivals.store(gen, std::memory_order_release);
    for (int r = 0; r < size_; ++r) {
      if (r != rank_) ring_doorbell(r);
    }
    for (bool noted = false;; noted = true) {
      const std::uint64_t token = event_token();
      waiting_.clear();
      for (int r = 0; r < size_; ++r) {
        auto* h = static_cast<SegmentHeader*>(segments_[static_cast<std::size_t>(r)]);
        if (r != rank_ && h->barrier_arrivals.load(std::memory_order_acquire) < gen) waiting_.push_back(r);
      }
      if (waiting_.empty()) {
        check_signatures(gen, signature);
        return;
      }
      if (!noted) note_wait(waiting_.size() == 1 ? waiting_[0] : -1);
      if (Clock::now() >= deadline) {
        std::string who;
        for (int r : waiting_) who += (who.empty() ? "" : ", ") + named(r);
        throw TimeoutError("shared-memory barrier timed out: rank(s) " + who + " did not arrive");
      }
      wait_event(token, deadline, waiting_, {});
    }
  }

  void abort(const std::string& reason) override {
    for (int r = 0; r < size_; ++r) {
      auto* h = static_cast<SegmentHeader*>(segments_[static_cast<std::size_t>(r)]);
      if (!h) continue;
      std::uint32_t zero = 0;
      // 2 = writing the reason, 1 = reason readable; only the first aborting rank writes it.
      if (h->aborted.compare_exchange_strong(zero, 2)) {
        const std::size_t n = std::min(reason.size(), sizeof h->abort_reason - 1);
        std::memcpy(h->abort_reason, reason.data(), n);
        h->abort_reason[n] = '\0';
        h->aborted_by.store(rank_);
        h->aborted.store(1);
      }
      ring_doorbell(r);
    }
  }

 private:
  SegmentHeader* own() const { return static_cast<SegmentHeader*>(segments_[static_cast<std::size_t>(rank_)]); }
  SegmentHeader* header(int r) const { return static_cast<SegmentHeader*>(segments_[static_cast<std::size_t>(r)]); }

  std::uint64_t min_progress_except(int except, Counter c) const {
    std::uint64_t m = UINT64_MAX;
    for (int r = 0; r < size_; ++r) {
      if (r != except) m = std::min(m, header(r)->progress[c].value.load(std::memory_order_seq_cst));
    }
    return m;
  }
  bool holds(const Want& w) const {
    return (w.rank < 0 ? min_progress_except(rank_, w.counter) : progress(w.rank, w.counter)) >= w.value;
  }
  bool any_holds(const std::vector<Want>& wants) const {
    for (const Want& w : wants) {
      if (holds(w)) return true;
    }
    return false;
  }
  // The ranks that hold up `wants`, for a timeout message.
  std::string behind(const std::vector<Want>& wants) const {
    std::string who;
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      for (const Want& w : wants) {
        if ((w.rank < 0 || w.rank == r) && progress(r, w.counter) < w.value) {
          who += (who.empty() ? "" : ", ") + named(r);
          break;
        }
      }
    }
    return who.empty() ? "?" : who;
  }

  // Sleeps on this rank's doorbell while it still reads `expected`, for at most a liveness slice and not past
  // `until`. Counted in `sleepers`, so ring_doorbell makes the futex call only when someone sleeps.
  static void sleep_on_doorbell(SegmentHeader* h, std::uint32_t expected, Clock::time_point until) {
    using std::chrono::milliseconds;
    const auto left = std::chrono::duration_cast<milliseconds>(until - Clock::now()) + milliseconds(1);
    const auto slice = std::clamp<milliseconds>(left, milliseconds(1), kLivenessSlice);
    h->sleepers.fetch_add(1, std::memory_order_seq_cst);
    if (h->doorbell.load(std::memory_order_seq_cst) == expected) futex_wait(&h->doorbell, expected, slice);
    h->sleepers.fetch_sub(1, std::memory_order_seq_cst);
  }

  void ring_doorbell(int r) {
    auto* h = static_cast<SegmentHeader*>(segments_[static_cast<std::size_t>(r)]);
    h->doorbell.fetch_add(1, std::memory_order_seq_cst);
    if (h->sleepers.load(std::memory_order_seq_cst) > 0) futex_wake_all(&h->doorbell);
  }

  std::string named(int r) const {
    return std::to_string(rank_names_.empty() ? r : rank_names_[static_cast<std::size_t>(r)]);
  }

  void check_aborted() const {
    const SegmentHeader* h = own();
    const std::uint32_t state = h->aborted.load(std::memory_order_acquire);
    if (state == 0) return;
    const int by = h->aborted_by.load();
    if (by == rank_) throw PeerError("comm shm: this rank aborted the group");
    throw PeerError("rank " + named(by) + " aborted the group" +
                    (state == 1 ? std::string(": ") + h->abort_reason : std::string()));
  }

  void check_signatures(std::uint64_t gen, std::uint64_t signature) const {
    for (int r = 0; r < size_; ++r) {
      auto* h = static_cast<SegmentHeader*>(segments_[static_cast<std::size_t>(r)]);
      if (r != rank_ && h->barrier_signature[gen % 2].load(std::memory_order_relaxed) != signature) {
        throw PeerError("mismatched collectives: rank " + named(r) +
                        " entered a shared-memory collective "
                        "with a different op, dtype or size than rank " +
                        named(rank_) +
                        "; every rank must issue the same collectives with the same sizes in the same order");
      }
    }
  }

  void check_alive(int peer) const {
    const int pid = pids_[static_cast<std::size_t>(peer)];
    if (liveness_.exited(peer)) {
      throw PeerError("rank " + named(peer) + " (pid " + std::to_string(pid) +
                      ") exited while this rank was waiting for it");
    }
  }

  void create_own_segment() {
    std::random_device rd;
    char name[96];
    std::snprintf(name, sizeof name, "/ctcomm-%d-%08x%08x-r%d", static_cast<int>(getpid()), rd(), rd(), rank_);
    name_ = name;
    const int fd = shm_open(name_.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) throw CommError("comm shm: shm_open(" + name_ + ") failed: " + std::strerror(errno));
    linked_ = true;
    const std::size_t bytes = segment_bytes(size_, ring_bytes_, kParts, slot_bytes_, slots_);
    if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      ::close(fd);
      throw CommError("comm shm: cannot size segment " + name_ + " to " + std::to_string(bytes) +
                      " bytes: " + std::strerror(errno) + " (is /dev/shm full? set CTRUN_COMM_TRANSPORT=tcp)");
    }
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (p == MAP_FAILED) throw CommError("comm shm: mmap failed: " + std::string(std::strerror(errno)));
    segments_[static_cast<std::size_t>(rank_)] = p;
    // A fresh segment is zero-filled: atomics start at 0. Publish the header fields before the name.
    auto* h = static_cast<SegmentHeader*>(p);
    h->ring_bytes = ring_bytes_;
    h->pid = static_cast<std::int32_t>(getpid());
    h->start_time = own_start_time();
    h->self_address = reinterpret_cast<std::uint64_t>(h);
    h->size = size_;
    std::atomic_thread_fence(std::memory_order_release);
    h->magic = kSegmentMagic;
    pids_[static_cast<std::size_t>(rank_)] = h->pid;
  }

  void map_peer(store::Store& store, int peer, Duration timeout) {
    const std::string key = "shm/" + std::to_string(peer);
    try {
      store.wait({key}, timeout);
    } catch (const store::TimeoutError&) {
      throw TimeoutError("comm shm: rank " + std::to_string(peer) + " did not publish its segment within " +
                         std::to_string(timeout.count()) + " ms");
    }
    const std::string name = store.get(key);
    const int fd = shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
    if (fd < 0) {
      throw CommError("comm shm: cannot open rank " + std::to_string(peer) + "'s segment " + name + ": " +
                      std::strerror(errno) + " (ranks in different containers? set CTRUN_COMM_TRANSPORT=tcp)");
    }
    const std::size_t bytes = segment_bytes(size_, ring_bytes_, kParts, slot_bytes_, slots_);
    struct stat st {};
    fstat(fd, &st);
    if (static_cast<std::size_t>(st.st_size) != bytes) {
      ::close(fd);
      throw CommError("comm shm: rank " + std::to_string(peer) + "'s segment has " + std::to_string(st.st_size) +
                      " bytes, expected " + std::to_string(bytes) +
                      " (different CTRUN_COMM_SHM_RING_BYTES, _WORKSPACE_BYTES or _SLOTS?)");
    }
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (p == MAP_FAILED) throw CommError("comm shm: mmap failed: " + std::string(std::strerror(errno)));
    segments_[static_cast<std::size_t>(peer)] = p;
    auto* h = static_cast<SegmentHeader*>(p);
    if (h->magic != kSegmentMagic) throw CommError("comm shm: rank " + std::to_string(peer) + "'s segment is invalid");
    pids_[static_cast<std::size_t>(peer)] = h->pid;
    liveness_.watch(peer, h->pid, h->start_time);
  }

  // Whether process_vm_readv reads every peer's segment header at the address the peer mapped it (denied by
  // seccomp in some containers, by Yama's ptrace_scope, or across users).
  bool probe_peer_reads() const {
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      const auto* h = static_cast<const SegmentHeader*>(segments_[static_cast<std::size_t>(r)]);
      if (h->pid == getpid()) continue;
      std::uint64_t magic = 0;
      iovec l{&magic, sizeof magic};
      iovec rv{reinterpret_cast<void*>(h->self_address), sizeof magic};
      if (process_vm_readv(h->pid, &l, 1, &rv, 1, 0) != static_cast<ssize_t>(sizeof magic) || magic != kSegmentMagic)
        return false;
    }
    return true;
  }

  void unlink_own() {
    if (linked_) shm_unlink(name_.c_str());
    linked_ = false;
  }

  void release() {
    unlink_own();
    const std::size_t bytes = segment_bytes(size_, ring_bytes_, kParts, slot_bytes_, slots_);
    for (auto& seg : segments_) {
      if (seg) munmap(seg, bytes);
      seg = nullptr;
    }
  }

  int rank_;
  int size_;
  std::vector<int> rank_names_;  // how errors name ranks (Options::rank_names)
  std::size_t ring_bytes_;
  std::size_t slot_bytes_;
  int slots_;
  std::size_t stream_bytes_;
  std::uint64_t pieces_ = 0;
  unsigned unflushed_ = 0;  // counters published since the last flush_wakes (bit per counter)
  std::size_t pipeline_bytes_;
  bool oversubscribed_ = false;  // more ranks than cores
  std::string name_;
  bool linked_ = false;
  std::vector<void*> segments_;
  std::vector<int> pids_;
  PeerLiveness liveness_;
  Clock::time_point last_liveness_{};
  std::uint64_t part_counter_ = 0;
  std::uint64_t barrier_gen_ = 0;
  bool peer_reads_ = false;
  std::vector<int> waiting_;
};

}  // namespace

std::string host_key() {
  return host::name() + "|" + read_first_line("/proc/sys/kernel/random/boot_id") + "|" +
         link_target("/proc/self/ns/ipc") + "|" + link_target("/proc/self/ns/mnt") + "|" +
         link_target("/proc/self/ns/pid");
}

std::unique_ptr<Transport> create(std::shared_ptr<store::Store> store, int rank, int size, Options options) {
  return std::make_unique<ShmTransport>(std::move(store), rank, size, std::move(options));
}

}  // namespace ctrun::comm::transport::shm
