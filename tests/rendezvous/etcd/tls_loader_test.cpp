// ctrun's TLS module (rendezvous/etcd/tls_module.hpp): loaded from beside the binary when https is used, never
// mapped otherwise, and missing with a message that says what to do.
#include "rendezvous/etcd/tls_loader.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "rendezvous/etcd/etcd_transport.hpp"
#include "tests/support/child_process.hpp"
#include "tests/support/files.hpp"

namespace ctrun::rdzv::etcd {
namespace {

using namespace std::chrono_literals;

TEST(TlsLoader, OpensTheModuleBesideTheBinaryAndItLoadsCertificates) {
  EXPECT_EQ(tls_module().abi, kTlsModuleAbi);
  Options o;
  o.https = true;
  o.cacert = "/nonexistent/ctrun-ca.pem";
  try {
    TlsContext context(o);
    FAIL() << "a missing CA file was accepted";
  } catch (const store::StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/ctrun-ca.pem"), std::string::npos) << e.what();
  }
}

// The worker's parent is ctrun itself: its memory map is ctrun's.
TEST(TlsLoader, AJobWithoutHttpsNeverMapsOpenSsl) {
  test::ChildProcess run({CTRUN_BIN, "--standalone", "--nproc-per-node", "1", "--no-python", "sh", "-c",
                          "cat /proc/$PPID/maps"});
  ASSERT_EQ(run.wait_exit(60s), 0) << run.output();
  const std::string maps = run.output();
  EXPECT_NE(maps.find("ctrun"), std::string::npos) << maps;  // the map was read
  EXPECT_EQ(maps.find("libssl"), std::string::npos) << maps;
  EXPECT_EQ(maps.find("libcrypto"), std::string::npos) << maps;
  // Nor ctrun's crypto module (a job secret, checkpoint digests: common/auth/crypto_module.hpp) and its zlib.
  EXPECT_EQ(maps.find("libctrun_crypto"), std::string::npos) << maps;
  EXPECT_EQ(maps.find("libz.so"), std::string::npos) << maps;
}

// A job with a secret loads the crypto module (and so libcrypto) at start, before anything runs.
TEST(TlsLoader, AJobWithASecretMapsTheCryptoModule) {
  const std::filesystem::path dir = test::fresh_dir("ctrun-secret-maps");
  const auto key = dir / "job.key";
  std::ofstream(key) << "a-secret-of-this-test-0123456789\n";
  std::filesystem::permissions(key, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  test::ChildProcess run({CTRUN_BIN, "--standalone", "--secret-file", key.string(), "--nproc-per-node", "1",
                          "--no-python", "sh", "-c", "cat /proc/$PPID/maps"});
  ASSERT_EQ(run.wait_exit(60s), 0) << run.output();
  std::filesystem::remove_all(dir);
  EXPECT_NE(run.output().find("libctrun_crypto"), std::string::npos) << run.output();
  EXPECT_NE(run.output().find("libcrypto"), std::string::npos) << run.output();
}

TEST(TlsLoader, ACtrunWithoutItsModuleSaysWhatToDo) {
  const std::filesystem::path prefix = test::fresh_dir("ctrun-tls-missing");
  std::filesystem::create_directories(prefix / "bin");
  std::filesystem::copy_file(CTRUN_BIN, prefix / "bin" / "ctrun");
  test::ChildProcess run({(prefix / "bin" / "ctrun").string(), "--rdzv-backend", "etcd", "--rdzv-endpoint",
                          "https://127.0.0.1:1", "--rdzv-id", "tls-missing", "--nnodes", "1", "--no-python", "true"});
  const auto code = run.wait_exit(60s);
  std::filesystem::remove_all(prefix);
  ASSERT_TRUE(code.has_value()) << run.output();
  EXPECT_NE(*code, 0);
  EXPECT_NE(run.output().find("ctrun's TLS module (libctrun_etcd_tls.so)"), std::string::npos) << run.output();
}

// A ctrun installed without its crypto module, given a secret: a usage error at start that says what to do.
TEST(TlsLoader, ACtrunWithoutItsCryptoModuleSaysWhatToDo) {
  const std::filesystem::path prefix = test::fresh_dir("ctrun-crypto-missing");
  std::filesystem::create_directories(prefix / "bin");
  std::filesystem::copy_file(CTRUN_BIN, prefix / "bin" / "ctrun");
  std::ofstream(prefix / "job.key") << "a-secret-of-this-test-0123456789\n";
  test::ChildProcess run({(prefix / "bin" / "ctrun").string(), "--standalone", "--secret-file",
                          (prefix / "job.key").string(), "--no-python", "true"});
  const auto code = run.wait_exit(60s);
  std::filesystem::remove_all(prefix);
  ASSERT_TRUE(code.has_value()) << run.output();
  EXPECT_EQ(*code, 2) << run.output();
  EXPECT_NE(run.output().find("ctrun's crypto module (libctrun_crypto.so"), std::string::npos) << run.output();
}

}  // namespace
}  // namespace ctrun::rdzv::etcd
