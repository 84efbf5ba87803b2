#include "store/local_keyspace.hpp"

namespace ctrun::store::detail {

std::vector<std::string> run_multi_get(Keyspace& ks, const std::vector<std::string>& keys) {
  auto r = ks.multi_get(kLocalConn, keys);
  while (r.more) r = ks.continue_multi_get(kLocalConn, keys);
  checked(r);
  std::vector<std::string> out;
  out.reserve(r.values.size());
  for (const auto& v : r.values) out.push_back(v->bytes);
  return out;
}

void run_multi_set(Keyspace& ks, const std::vector<std::string>& keys, const std::vector<std::string>& values) {
  auto r = checked(ks.multi_set(kLocalConn, keys, values));
  while (r.more) r = checked(ks.continue_multi_set(kLocalConn, keys, values));
}

}  // namespace ctrun::store::detail
