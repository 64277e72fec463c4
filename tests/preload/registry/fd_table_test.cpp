#include "registry/fd_table.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "registry/tracked_socket.h"

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

// A lookup racing with another thread's close of the same descriptor: the reference
// is taken on the live socket or not at all, never on one the close has just freed (under ASan, a
// lookup that adds its reference after the table's answer fails here with a heap-use-after-free).
TEST_F(FdTableTest, HoldRacingWithCloseNeverTouchesAFreedSocket) {
  // The two threads must overlap for long: the closer goes on until the reader has taken many
  // references (or a generous bound passes, which the last check reports).
  constexpr int kFd = 3, kCloses = 200000;
  constexpr uint64_t kHolds = 20000;
  std::atomic<uint64_t> held{0};
  std::atomic<bool> done{false};
  std::thread closer([&] {
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    for (int i = 0; (i < kCloses || held.load() < kHolds) && std::chrono::steady_clock::now() < until; ++i) {
      TrackedSocket* previous = nullptr;
      ASSERT_TRUE(table_.exchange(kFd, new TrackedSocket(2, SocketRole::kClient), &previous));
      if (previous != nullptr) previous->release();
      ASSERT_TRUE(table_.exchange(kFd, nullptr, &previous));  // what close() does before the real one
      if (previous != nullptr) previous->release();
    }
    done = true;
  });
  while (!done) {
    if (TrackedSocket* socket = table_.hold(kFd)) {
      EXPECT_EQ(socket->role(), SocketRole::kClient);
      socket->release();
      held.fetch_add(1, std::memory_order_relaxed);
    }
  }
  closer.join();
  EXPECT_GE(held.load(), kHolds);
  EXPECT_EQ(table_.find(kFd), nullptr);
}

}  // namespace
}  // namespace tcp2rdma::preload
