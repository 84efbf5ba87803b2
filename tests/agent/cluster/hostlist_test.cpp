// Slurm hostlist expansion: fixed expectations, errors, and Slurm's own `scontrol show hostnames` on the same
// expressions where Slurm is installed (scontrol needs only a config file for this, no slurmctld).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "agent/cluster/hostlist.hpp"

namespace ctrun::agent::cluster {
namespace {

using V = std::vector<std::string>;

TEST(Hostlist, Expands) {
  EXPECT_EQ(expand_hostlist("node[01-04,07],gpu-a[1-2]"),
            (V{"node01", "node02", "node03", "node04", "node07", "gpu-a1", "gpu-a2"}));
  EXPECT_EQ(expand_hostlist("n[9-11]"), (V{"n9", "n10", "n11"}));
  EXPECT_EQ(expand_hostlist("n[08-10]"), (V{"n08", "n09", "n10"}));
  EXPECT_EQ(expand_hostlist("r[1-2]n[1,3]"), (V{"r1n1", "r1n3", "r2n1", "r2n3"}));
  EXPECT_EQ(expand_hostlist("a[1-2]b[3-4]c[5-6]"),  // Slurm's order: the last group, then the first, ...
            (V{"a1b3c5", "a1b3c6", "a2b3c5", "a2b3c6", "a1b4c5", "a1b4c6", "a2b4c5", "a2b4c6"}));
  EXPECT_EQ(expand_hostlist("foo"), V{"foo"});
  EXPECT_EQ(expand_hostlist("a,b,,c,"), (V{"a", "b", "c"}));
  EXPECT_EQ(expand_hostlist("n[1-3]-ib"), (V{"n1-ib", "n2-ib", "n3-ib"}));  // a suffix (Slurm rejects it)
  EXPECT_EQ(expand_hostlist("n[7]"), V{"n7"});
  EXPECT_EQ(first_host("gpu[003-100],cpu1"), "gpu003");
  EXPECT_EQ(first_host("10.0.0.5,10.0.0.6"), "10.0.0.5");
}

TEST(Hostlist, RejectsBadLists) {
  for (const char* bad :
       {"", ",", "n[1-2", "n1-2]", "n[[1]]", "n[]", "n[a-b]", "n[3-1]", "n[1-]", "n[-1]", "a b", "n[0-99999999]"}) {
    EXPECT_THROW(expand_hostlist(bad), std::invalid_argument) << bad;
  }
}

std::string run(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  ::pclose(p);
  return out;
}

TEST(Hostlist, MatchesScontrol) {
  if (run("command -v scontrol").empty()) GTEST_SKIP() << "scontrol (slurm-wlm) is not installed";
  std::string conf = ::testing::TempDir() + "/ctrun_hostlist_slurm.conf";
  std::ofstream(conf) << "ClusterName=t\nSlurmctldHost=localhost\nNodeName=n1 CPUs=1\nPartitionName=p Nodes=n1\n";
  const std::vector<std::string> lists = {"node[01-04,07],gpu-a[1-2]",
                                          "n[9-11]",
                                          "n[08-10]",
                                          "r[1-2]n[1,3]",
                                          "foo",
                                          "a,b,c",
                                          "n[001-003,010]",
                                          "n[1-2],m[3]",
                                          "n1,n[2-3],n4",
                                          "rack[1-2]-node[1,3]",
                                          "x[0-15]",
                                          "c[1-3,5,7-8]",
                                          "h[098-102]",
                                          "gpu-a[1-2],gpu-b[10-11],cpu",
                                          "a[1-2]b[3-4]c[5-6]",
                                          "a[1-2]b[3-4]c[5-6]d[7-8]",
                                          "n[0000-0003]",
                                          "login1,compute[1-2]"};
  int compared = 0;
  for (const auto& list : lists) {
    std::string text = run("SLURM_CONF=" + conf + " scontrol show hostnames '" + list + "' 2>/dev/null");
    if (text.empty()) GTEST_SKIP() << "scontrol show hostnames does not work here (for '" << list << "')";
    std::istringstream in(text);
    V slurm;
    for (std::string h; in >> h;) slurm.push_back(h);
    EXPECT_EQ(expand_hostlist(list), slurm) << list;
    ++compared;
  }
  EXPECT_EQ(compared, static_cast<int>(lists.size()));
}

}  // namespace
}  // namespace ctrun::agent::cluster
