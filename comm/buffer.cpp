#include "comm/buffer.hpp"

#include <string>

namespace ctrun::comm {

Buffer Buffer::slice(std::size_t offset, std::size_t count) const {
  if (offset > count_ || count > count_ - offset) {
    throw InvalidArgumentError("buffer slice [" + std::to_string(offset) + ", " + std::to_string(offset + count) +
                               ") is out of range of a buffer of " + std::to_string(count_) + " elements");
  }
  return Buffer(static_cast<char*>(data_) + offset * element_size(dtype_), count, dtype_, device_);
}

std::vector<Buffer> Buffer::split(std::size_t parts) const {
  if (parts == 0 || count_ % parts != 0) {
    throw InvalidArgumentError("a buffer of " + std::to_string(count_) + " elements cannot be split into " +
                               std::to_string(parts) + " equal parts");
  }
  std::vector<Buffer> out;
  out.reserve(parts);
  const std::size_t each = count_ / parts;
  for (std::size_t i = 0; i < parts; ++i) out.push_back(slice(i * each, each));
  return out;
}

}  // namespace ctrun::comm
