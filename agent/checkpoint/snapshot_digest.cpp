#include "agent/checkpoint/snapshot_digest.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/auth/crypto.hpp"

namespace ctrun::agent::checkpoint {
namespace {

constexpr char kTrailerMagic[8] = {'C', 'T', 'R', 'U', 'N', 'D', 'G', '1'};
constexpr char kSnapshotMagic[8] = {'C', 'T', 'R', 'U', 'N', 'C', 'K', '1'};
constexpr std::uint32_t kCrcChunks = 1;
constexpr unsigned kMaxThreads = 4;

template <typename T>
T le_at(const unsigned char* at) {
  T value = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) value |= static_cast<T>(at[i]) << (8 * i);
  return value;
}

struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// The root from the chunks' CRC-32s, computed on a few threads by `crc_of(first byte, bytes)`.
template <typename CrcOf>
std::uint32_t root_from(std::uint64_t size, std::uint64_t chunk, CrcOf crc_of) {
  const std::uint64_t chunks = (size + chunk - 1) / chunk;
  std::vector<unsigned char> crcs(chunks * 4);
  const unsigned threads =
      static_cast<unsigned>(std::min<std::uint64_t>({kMaxThreads, std::max(1u, std::thread::hardware_concurrency()),
                                                     std::max<std::uint64_t>(chunks, 1)}));
  std::vector<std::string> errors(threads);
  auto work = [&](unsigned first) {
    try {
      for (std::uint64_t i = first; i < chunks; i += threads) {
        const std::uint64_t at = i * chunk;
        const std::uint32_t crc = crc_of(at, std::min(chunk, size - at));
        for (int b = 0; b < 4; ++b) crcs[i * 4 + b] = static_cast<unsigned char>(crc >> (8 * b));
      }
    } catch (const std::exception& e) {
      errors[first] = e.what();
    }
  };
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads; ++t) pool.emplace_back(work, t);
  work(0);
  for (auto& t : pool) t.join();
  for (const auto& e : errors)
    if (!e.empty()) throw std::runtime_error(e);
  return auth::crc32(crcs.data(), crcs.size());
}

// A file's chunk, read in pieces with pread into a small buffer of the thread's own (kept in its cache while its CRC
// is taken): on tmpfs this costs half the CPU of mapping the file (its page-table work, not the CRC, dominated).
std::uint32_t file_crc(int fd, std::uint64_t at, std::uint64_t size) {
  constexpr std::size_t kPiece = 1 << 20;
  thread_local std::vector<unsigned char> buffer(kPiece);
  std::uint32_t crc = 0;
  while (size > 0) {
    const ssize_t n = ::pread(fd, buffer.data(), std::min<std::uint64_t>(kPiece, size), static_cast<off_t>(at));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw std::runtime_error(std::string("cannot read the snapshot: ") + (n == 0 ? "it ended early" : std::strerror(errno)));
    crc = auth::crc32(buffer.data(), static_cast<std::size_t>(n), crc);
    at += static_cast<std::uint64_t>(n);
    size -= static_cast<std::uint64_t>(n);
  }
  return crc;
}

}  // namespace

std::string digest_trailer(const void* payload, std::uint64_t size, std::uint64_t chunk) {
  std::string out(kTrailerBytes, '\0');
  std::memcpy(out.data(), kTrailerMagic, sizeof kTrailerMagic);
  auto put = [&](std::size_t at, std::uint64_t value, std::size_t bytes) {
    for (std::size_t i = 0; i < bytes; ++i) out[at + i] = static_cast<char>((value >> (8 * i)) & 0xff);
  };
  put(8, kCrcChunks, 4);
  const auto* bytes = static_cast<const unsigned char*>(payload);
  put(12, root_from(size, chunk, [&](std::uint64_t at, std::uint64_t n) { return auth::crc32(bytes + at, n); }), 4);
  put(16, chunk, 8);
  put(24, size, 8);
  return out;
}

std::string check_snapshot(const std::string& path, int rank, std::int64_t step) {
  Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  if (f.fd < 0) return "cannot open " + path + ": " + std::strerror(errno);
  struct stat st {};
  if (::fstat(f.fd, &st) != 0 || st.st_size < static_cast<off_t>(kTrailerBytes + 16))
    return "the snapshot is too short to be one";
  const auto size = static_cast<std::uint64_t>(st.st_size);
  unsigned char trailer[kTrailerBytes];
  if (::pread(f.fd, trailer, sizeof trailer, static_cast<off_t>(size - kTrailerBytes)) !=
      static_cast<ssize_t>(sizeof trailer))
    return "cannot read the snapshot's digest";
  if (std::memcmp(trailer, kTrailerMagic, sizeof kTrailerMagic) != 0)
    return "the snapshot carries no digest (saved while the job ran on one node, or by another ctrun version)";
  const auto algorithm = le_at<std::uint32_t>(trailer + 8);
  const auto root = le_at<std::uint32_t>(trailer + 12);
  const auto chunk = le_at<std::uint64_t>(trailer + 16);
  const auto payload = le_at<std::uint64_t>(trailer + 24);
  if (algorithm != kCrcChunks || chunk == 0 || payload + kTrailerBytes != size)
    return "the snapshot's digest is not one this ctrun reads (or its trailer was changed)";
  std::string problem;
  try {
    if (root_from(payload, chunk, [&](std::uint64_t at, std::uint64_t n) { return file_crc(f.fd, at, n); }) != root)
      return "its bytes do not match the digest saved with it (changed in memory or on the way)";
  } catch (const std::exception& e) {
    return e.what();
  }
  // The digest covers the header, so what it says is what the saving rank wrote.
  unsigned char head[16];
  if (::pread(f.fd, head, sizeof head, 0) != static_cast<ssize_t>(sizeof head) ||
      std::memcmp(head, kSnapshotMagic, sizeof kSnapshotMagic) != 0)
    return "it is not a ctrun checkpoint snapshot";
  const auto length = le_at<std::uint64_t>(head + 8);
  try {
    if (length > payload - 16 || length > (1u << 30)) throw std::runtime_error("header length");
    std::string text(length, '\0');
    if (::pread(f.fd, text.data(), length, 16) != static_cast<ssize_t>(length)) throw std::runtime_error("short read");
    const auto header = nlohmann::json::parse(text);
    if (header.at("rank").get<int>() != rank || header.at("step").get<std::int64_t>() != step)
      problem = "it is the snapshot of rank " + header.at("rank").dump() + " step " + header.at("step").dump() +
                ", not of rank " + std::to_string(rank) + " step " + std::to_string(step);
  } catch (const std::exception& e) {
    problem = std::string("its header is unreadable (") + e.what() + ")";
  }
  return problem;
}

}  // namespace ctrun::agent::checkpoint
