// The behaviour checks every Store must pass (store_checks.hpp), run against the two in-process
// implementations: MemoryStore (one object shared by "clients") and FileStore (one object per client, all on
// the same file, as ranks of a file:// group are). The same checks run against TcpStore + our server in
// tcp_store_test.cpp (TcpStoreBothDialects): three stores, one semantics (store/keyspace.hpp).
#include <unistd.h>

#include <filesystem>

#include "store/file_store.hpp"
#include "store/memory_store.hpp"
#include "tests/store/store_checks.hpp"

namespace ctrun::test {
namespace {

// MemoryStore "clients" share one store: the factory hands out forwarding views of it.
class SharedMemoryView final : public store::Store {
 public:
  explicit SharedMemoryView(std::shared_ptr<store::Store> s) : s_(std::move(s)) {}
  void set(const std::string& k, std::string_view v) override { s_->set(k, v); }
  std::string get(const std::string& k) override { return s_->get(k); }
  std::string compare_set(const std::string& k, std::string_view e, std::string_view d) override {
    return s_->compare_set(k, e, d);
  }
  std::int64_t add(const std::string& k, std::int64_t d) override { return s_->add(k, d); }
  bool check(const std::vector<std::string>& k) override { return s_->check(k); }
  using Store::wait;
  void wait(const std::vector<std::string>& k, store::Duration t) override { s_->wait(k, t); }
  std::int64_t num_keys() override { return s_->num_keys(); }
  bool delete_key(const std::string& k) override { return s_->delete_key(k); }
  void append(const std::string& k, std::string_view v) override { s_->append(k, v); }
  std::vector<std::string> multi_get(const std::vector<std::string>& k) override { return s_->multi_get(k); }
  void multi_set(const std::vector<std::string>& k, const std::vector<std::string>& v) override { s_->multi_set(k, v); }
  void queue_push(const std::string& k, std::string_view v) override { s_->queue_push(k, v); }
  std::optional<std::string> queue_pop(const std::string& k, bool b) override { return s_->queue_pop(k, b); }
  std::int64_t queue_len(const std::string& k) override { return s_->queue_len(k); }
  std::vector<std::string> list_keys() override { return s_->list_keys(); }
  void barrier(const std::string& k, std::int64_t n, store::Duration t) override { s_->barrier(k, n, t); }
  store::Duration timeout() const override { return s_->timeout(); }
  void set_timeout(store::Duration t) override { s_->set_timeout(t); }

 private:
  std::shared_ptr<store::Store> s_;
};

class MemoryStoreSemantics : public ::testing::Test {
 protected:
  std::shared_ptr<store::MemoryStore> shared_ = std::make_shared<store::MemoryStore>(std::chrono::seconds(10));
  StoreFactory make_ = [this] { return std::make_unique<SharedMemoryView>(shared_); };
};

TEST_F(MemoryStoreSemantics, SetGet) { check_set_get(*shared_); }
TEST_F(MemoryStoreSemantics, Add) { check_add(*shared_); }
TEST_F(MemoryStoreSemantics, AddErrors) { check_add_errors(make_); }
TEST_F(MemoryStoreSemantics, CompareSet) { check_compare_set(*shared_); }
TEST_F(MemoryStoreSemantics, CheckDeleteNumKeys) { check_check_delete_num_keys(*shared_); }
TEST_F(MemoryStoreSemantics, MultiAndAppend) { check_multi_and_append(*shared_); }
TEST_F(MemoryStoreSemantics, DeferredWait) { check_deferred_wait(*shared_, make_); }
TEST_F(MemoryStoreSemantics, Barrier) { check_barrier(make_, 4); }
TEST_F(MemoryStoreSemantics, ThreadSafety) { check_thread_safety(*shared_); }
TEST_F(MemoryStoreSemantics, BigMulti) { check_big_multi(*shared_); }
TEST_F(MemoryStoreSemantics, Queues) { check_queues(*shared_, make_); }
TEST_F(MemoryStoreSemantics, CompareSetWakesAndListKeys) { check_compare_set_wakes_and_list_keys(*shared_, make_); }

class FileStoreSemantics : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = std::filesystem::temp_directory_path() / ("ctrun_file_store_test_" + std::to_string(::getpid()) + "_" +
                                                      ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove(path_);
  }
  void TearDown() override { std::filesystem::remove(path_); }
  std::unique_ptr<Store> open() { return std::make_unique<store::FileStore>(path_.string(), std::chrono::seconds(10)); }

  std::filesystem::path path_;
  StoreFactory make_ = [this] { return open(); };
};

TEST_F(FileStoreSemantics, SetGet) { check_set_get(*open()); }
TEST_F(FileStoreSemantics, Add) { check_add(*open()); }
TEST_F(FileStoreSemantics, AddErrors) { check_add_errors(make_); }
TEST_F(FileStoreSemantics, CompareSet) { check_compare_set(*open()); }
TEST_F(FileStoreSemantics, CheckDeleteNumKeys) { check_check_delete_num_keys(*open()); }
TEST_F(FileStoreSemantics, MultiAndAppend) { check_multi_and_append(*open()); }
TEST_F(FileStoreSemantics, DeferredWaitAcrossClientsOfOneFile) {
  auto s = open();
  check_deferred_wait(*s, make_);
}
TEST_F(FileStoreSemantics, BarrierAcrossClientsOfOneFile) { check_barrier(make_, 4); }
TEST_F(FileStoreSemantics, BigMulti) { check_big_multi(*open()); }
TEST_F(FileStoreSemantics, QueuesAcrossClientsOfOneFile) {
  auto s = open();
  check_queues(*s, make_);
}
TEST_F(FileStoreSemantics, CompareSetWakesAndListKeys) {
  auto s = open();
  check_compare_set_wakes_and_list_keys(*s, make_);
}
TEST_F(FileStoreSemantics, WaitTimeoutNamesKeys) {
  auto s = open();
  EXPECT_THROW(s->wait({"never"}, std::chrono::milliseconds(50)), store::TimeoutError);
}

}  // namespace
}  // namespace ctrun::test
