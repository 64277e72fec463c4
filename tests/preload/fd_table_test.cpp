#include "fd_table.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "tracked_socket.h"

namespace tcp2rdma::preload {
namespace {

// A table of our own (not the process-wide one the wrappers use).
class FdTableTest : public ::testing::Test {
 protected:
  FdTable table_;
  TrackedSocket* socket_a_ = new TrackedSocket(2, SocketRole::kUnknown);
  TrackedSocket* socket_b_ = new TrackedSocket(10, SocketRole::kClient);
  ~FdTableTest() override {
    socket_a_->release();
    socket_b_->release();
  }
};

TEST_F(FdTableTest, EmptyTableFindsNothing) {
  EXPECT_EQ(table_.find(0), nullptr);
  EXPECT_EQ(table_.find(12345), nullptr);
  EXPECT_EQ(table_.high_water(), 0);
}

TEST_F(FdTableTest, OutOfRangeDescriptorsAreNeverOurs) {
  EXPECT_EQ(table_.find(-1), nullptr);
  EXPECT_EQ(table_.find(FdTable::kMaxFd), nullptr);
  EXPECT_FALSE(table_.exchange(-1, socket_a_, nullptr));
  EXPECT_FALSE(table_.exchange(FdTable::kMaxFd, socket_a_, nullptr));
}

TEST_F(FdTableTest, ExchangeReturnsWhatWasThere) {
  TrackedSocket* previous = socket_b_;
  ASSERT_TRUE(table_.exchange(7, socket_a_, &previous));
  EXPECT_EQ(previous, nullptr);
  EXPECT_EQ(table_.find(7), socket_a_);
  ASSERT_TRUE(table_.exchange(7, socket_b_, &previous));
  EXPECT_EQ(previous, socket_a_);
  ASSERT_TRUE(table_.exchange(7, nullptr, &previous));
  EXPECT_EQ(previous, socket_b_);
  EXPECT_EQ(table_.find(7), nullptr);
}

TEST_F(FdTableTest, PageBoundariesAndHighWater) {
  const int edges[] = {0, FdTable::kPageSize - 1, FdTable::kPageSize, FdTable::kMaxFd - 1};
  for (int fd : edges) ASSERT_TRUE(table_.exchange(fd, socket_a_, nullptr)) << fd;
  for (int fd : edges) EXPECT_EQ(table_.find(fd), socket_a_) << fd;
  EXPECT_EQ(table_.find(1), nullptr);
  EXPECT_EQ(table_.find(FdTable::kPageSize + 1), nullptr);
  EXPECT_EQ(table_.high_water(), FdTable::kMaxFd);
}

TEST_F(FdTableTest, ConcurrentWritersOnOnePageKeepEveryEntry) {
  constexpr int kThreads = 8, kPerThread = 500;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) table_.exchange(t * kPerThread + i, socket_b_, nullptr);
    });
  }
  for (auto& thread : threads) thread.join();
  for (int fd = 0; fd < kThreads * kPerThread; ++fd) ASSERT_EQ(table_.find(fd), socket_b_) << fd;
  EXPECT_EQ(table_.high_water(), kThreads * kPerThread);
}

}  // namespace
}  // namespace tcp2rdma::preload
