#pragma once
// A connection's queued replies as a list of segments: small bytes copied inline, and values shared with
// the keyspace by reference count. N connections reading one 8 MiB value (GET, MULTI_GET repeating a key,
// WATCH events, ...) then hold one copy of it, and the server writes the segments with one gather write
// (writev) instead of first concatenating them.
//
// Sizes are tracked two ways: size() is what the client still has to read (the per-connection budget and
// the pause threshold are on that), inline_size() is what this buffer allocated itself (the part of the
// server's memory the buffer adds; shared values are counted by the keyspace that holds them).

#include <sys/uio.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace ctrun::store::detail {

// A value held by the keyspace. When it leaves the keyspace (overwritten, deleted, cleared) while replies
// still reference it, its bytes move to an "orphaned" counter that keeps counting against the server's
// memory limit until the last reply referencing it is written.
struct Blob {
  explicit Blob(std::string b) : bytes(std::move(b)) {}
  ~Blob() {
    if (orphaned) *orphaned -= bytes.size();
  }
  Blob(const Blob&) = delete;
  Blob& operator=(const Blob&) = delete;

  std::string bytes;
  std::shared_ptr<std::uint64_t> orphaned;  // set when the keyspace let go while replies still hold it
};
using BlobPtr = std::shared_ptr<Blob>;

class ReplyBuffer {
 public:
  // Values at least this long are shared rather than copied.
  static constexpr std::size_t kShareAtLeast = 1024;

  void u8(std::uint8_t v);
  void u32(std::uint32_t v);
  void i64(std::int64_t v);
  void u64(std::uint64_t v);
  void bytes(std::string_view b);         // u64 length + copied bytes
  void value(const BlobPtr& b);           // u64 length + the value (shared when large)
  void raw(std::string_view b);           // bytes as they are
  // Moves other's unwritten bytes to the end of this buffer (shared values stay shared); other is left empty.
  void append(ReplyBuffer& other);

  bool empty() const { return size_ == 0; }
  std::uint64_t size() const { return size_; }
  std::uint64_t inline_size() const { return inline_; }

  // Fills up to max iovecs with the bytes at the front; returns how many.
  int gather(iovec* iov, int max) const;
  // n bytes at the front were written.
  void consume(std::size_t n);
  void clear();

 private:
  struct Segment {
    std::string data;  // inline bytes (when blob is null)
    BlobPtr blob;      // a shared value
    std::size_t length() const { return blob ? blob->bytes.size() : data.size(); }
  };
  std::string& tail();

  std::vector<Segment> segs_;
  std::size_t head_ = 0;      // first segment not fully written
  std::size_t head_off_ = 0;  // bytes of it already written
  std::uint64_t size_ = 0;
  std::uint64_t inline_ = 0;
};

}  // namespace ctrun::store::detail
