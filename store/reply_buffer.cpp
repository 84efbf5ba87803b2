#include "store/reply_buffer.hpp"

#include <cstring>

namespace ctrun::store::detail {

namespace {
template <typename T>
void append_le(std::string& s, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // the wire is little-endian, as are the hosts we build for
  s.append(b, sizeof(T));
}
}  // namespace

std::string& ReplyBuffer::tail() {
  if (segs_.size() == head_ || segs_.back().blob) segs_.emplace_back();
  return segs_.back().data;
}

void ReplyBuffer::u8(std::uint8_t v) {
  tail().push_back(static_cast<char>(v));
  size_ += 1;
  inline_ += 1;
}
void ReplyBuffer::u32(std::uint32_t v) {
  append_le(tail(), v);
  size_ += 4;
  inline_ += 4;
}
void ReplyBuffer::i64(std::int64_t v) {
  append_le(tail(), v);
  size_ += 8;
  inline_ += 8;
}
void ReplyBuffer::u64(std::uint64_t v) {
  append_le(tail(), v);
  size_ += 8;
  inline_ += 8;
}
void ReplyBuffer::raw(std::string_view b) {
  tail().append(b);
  size_ += b.size();
  inline_ += b.size();
}
void ReplyBuffer::bytes(std::string_view b) {
  u64(b.size());
  raw(b);
}
void ReplyBuffer::value(const BlobPtr& b) {
  if (b->bytes.size() < kShareAtLeast) {
    bytes(b->bytes);
    return;
  }
  u64(b->bytes.size());
  segs_.push_back(Segment{{}, b});
  size_ += b->bytes.size();
}

void ReplyBuffer::append(ReplyBuffer& other) {
  for (std::size_t i = other.head_; i < other.segs_.size(); ++i) {
    auto& seg = other.segs_[i];
    const std::size_t off = i == other.head_ ? other.head_off_ : 0;
    if (seg.blob && off == 0) {
      size_ += seg.blob->bytes.size();
      segs_.push_back(Segment{{}, std::move(seg.blob)});
    } else {
      raw(std::string_view(seg.blob ? seg.blob->bytes : seg.data).substr(off));
    }
  }
  other.clear();
}

int ReplyBuffer::gather(iovec* iov, int max) const {
  int n = 0;
  for (std::size_t i = head_; i < segs_.size() && n < max; ++i) {
    const auto& s = segs_[i];
    const char* p = s.blob ? s.blob->bytes.data() : s.data.data();
    std::size_t len = s.length();
    std::size_t off = i == head_ ? head_off_ : 0;
    if (len == off) continue;
    iov[n].iov_base = const_cast<char*>(p + off);
    iov[n].iov_len = len - off;
    ++n;
  }
  return n;
}

void ReplyBuffer::consume(std::size_t n) {
  size_ -= n;
  while (n > 0 && head_ < segs_.size()) {
    auto& s = segs_[head_];
    std::size_t left = s.length() - head_off_;
    if (n < left) {
      head_off_ += n;
      return;
    }
    n -= left;
    if (!s.blob) inline_ -= s.data.size();
    s = Segment{};  // drop the reference / the bytes now
    ++head_;
    head_off_ = 0;
  }
  if (head_ == segs_.size()) {
    // Everything written: keep the vector's small capacity, release a big one (a burst of replies).
    if (segs_.capacity() > 64) std::vector<Segment>().swap(segs_);
    segs_.clear();
    head_ = 0;
  }
}

void ReplyBuffer::clear() {
  std::vector<Segment>().swap(segs_);
  head_ = head_off_ = 0;
  size_ = inline_ = 0;
}

}  // namespace ctrun::store::detail
