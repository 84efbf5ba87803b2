// all_gather of fixed-size byte buffers: every rank learns every rank's host name and pid.
#include <unistd.h>

#include <array>
#include <cstring>
#include <vector>

#include "example_util.hpp"

int main(int argc, char** argv) {
  auto pg = example::init(argc, argv);
  const int rank = pg->rank();
  constexpr std::size_t kEntry = 128;  // fixed size: all_gather needs equal sizes on every rank
  std::vector<char> mine(kEntry, '\0');
  char host[64] = {};
  gethostname(host, sizeof host - 1);
  std::snprintf(mine.data(), kEntry, "rank=%d pid=%d host=%s", rank, static_cast<int>(getpid()), host);
  std::vector<char> all(kEntry * static_cast<std::size_t>(pg->size()));
  pg->all_gather_into(all, mine);
  for (int r = 0; r < pg->size(); ++r) {
    const char* entry = all.data() + static_cast<std::size_t>(r) * kEntry;
    int got_rank = -1;
    int pid = 0;
    EXAMPLE_CHECK(std::sscanf(entry, "rank=%d pid=%d", &got_rank, &pid) == 2 && got_rank == r && pid > 0,
                  "rank %d: entry %d is '%.*s'", rank, r, static_cast<int>(kEntry), entry);
    if (rank == 0) std::printf("%s\n", entry);
  }
  return 0;
}
