// A C++ comm worker: three all_reduces, then rank HANG_RANK sleeps before the fourth (#3) while the others
// enter it (file:// rendezvous at HANG_STORE_FILE; RANK and WORLD_SIZE from the environment).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "comm/process_group.hpp"

int main() {
  const int rank = std::atoi(std::getenv("RANK"));
  const int world = std::atoi(std::getenv("WORLD_SIZE"));
  const int hang_rank = std::getenv("HANG_RANK") ? std::atoi(std::getenv("HANG_RANK")) : -1;
  auto pg = ctrun::comm::ProcessGroup::init(std::string("file://") + std::getenv("HANG_STORE_FILE"), {}, rank, world);
  std::vector<float> v(4, 1.0f);
  for (int i = 0; i < 3; ++i) pg->all_reduce(ctrun::comm::Buffer(v));
  if (rank == hang_rank) std::this_thread::sleep_for(std::chrono::seconds(120));
  pg->all_reduce(ctrun::comm::Buffer(v));
  std::printf("rank %d done\n", rank);
  return 0;
}
