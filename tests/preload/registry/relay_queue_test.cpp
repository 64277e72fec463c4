// A read relay's queue (preload/registry/tcp_prefix.h, start_relay): the parent's relay feeds it, the
// child (another TcpPrefix that adopts the memfd and eventfd, as over the fork channel) and the parent
// take from it; each byte goes to one reader, in order, and what follows the last byte is said once.
// On the host: threads and a forked process stand in for the relay and the readers.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

#include "process/fork_channel.h"
#include "registry/lent_streams.h"
#include "registry/tcp_prefix.h"

namespace tcp2rdma::preload {
namespace {

// The stream: 4-byte little-endian counters. Every feed, take and ring piece below is a multiple of 4
// bytes, so each reader gets whole counters and shows which bytes it took.
uint8_t pattern(uint64_t at) { return static_cast<uint8_t>((at / 4) >> (8 * (at % 4))); }

std::vector<uint32_t> counters(const std::vector<uint8_t>& bytes) {
  std::vector<uint32_t> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), out.size() * 4);
  return out;
}

// Feeds `total` bytes of the pattern through the queue, `window` at most queued, then `then`.
void feed(TcpPrefix* queue, uint64_t total, size_t window, TcpPrefix::Then then) {
  uint64_t at = 0;
  while (at < total) {
    std::lock_guard feeding(queue->feed_lock());
    iovec space[2];
    int pieces = queue->feed_space(space, window);
    if (pieces == 0) {
      queue->wait_room(window, 50);
      continue;
    }
    size_t n = 0;
    for (int i = 0; i < pieces && at + n < total; ++i) {
      size_t k = std::min<uint64_t>(space[i].iov_len, total - at - n);
      for (size_t j = 0; j < k; ++j) static_cast<uint8_t*>(space[i].iov_base)[j] = pattern(at + n + j);
      n += k;
      if (k < space[i].iov_len) break;
    }
    queue->commit(n);
    at += n;
  }
  queue->finish(then, then == TcpPrefix::Then::kError ? ECONNRESET : 0);
}

// Reads until the end; returns the bytes.
std::vector<uint8_t> read_all(TcpPrefix* queue) {
  std::vector<uint8_t> got;
  uint8_t buffer[7000];  // a multiple of 4
  for (;;) {
    iovec into{buffer, sizeof buffer};
    bool at_end = false;
    size_t n = queue->take(&into, 1, false, &at_end);
    got.insert(got.end(), buffer, buffer + n);
    if (at_end) return got;
    if (n == 0 && queue->fed()) {
      EXPECT_GE(queue->wait_for_bytes(5000), 0);
    }
    if (n == 0 && !queue->present()) return got;  // the kernel's turn (Then::kKernel)
  }
}

TEST(RelayQueue, EveryByteArrivesInOrderThroughASmallRingAndTheEndFollows) {
  TcpPrefix parents;
  ASSERT_TRUE(parents.start_relay(64 * 1024));
  TcpPrefix childs;
  ASSERT_TRUE(childs.adopt_relay(parents.shareable(), parents.wake()));
  EXPECT_TRUE(childs.relayed());
  EXPECT_TRUE(childs.present());  // fed, though empty: a read waits rather than going to the kernel
  constexpr uint64_t kTotal = 3 * 1024 * 1024 + 16;
  std::thread relay(feed, &parents, kTotal, 48 * 1024, TcpPrefix::Then::kEnd);
  std::vector<uint8_t> got = read_all(&childs);
  relay.join();
  ASSERT_EQ(got.size(), kTotal);
  for (uint64_t i = 0; i < kTotal; ++i) ASSERT_EQ(got[i], pattern(i)) << "at " << i;
  EXPECT_TRUE(childs.then_end());
}

TEST(RelayQueue, TwoProcessesTakeEachByteOnceAndInOrder) {
  TcpPrefix parents;
  ASSERT_TRUE(parents.start_relay(32 * 1024));
  constexpr uint64_t kTotal = 2 * 1024 * 1024;
  int report[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, report), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The child reads through its own mapping of the same memfd, as after the fork channel's answer.
    TcpPrefix childs;
    if (!childs.adopt_relay(parents.shareable(), parents.wake())) _exit(2);
    std::vector<uint8_t> got = read_all(&childs);
    uint64_t n = got.size();
    (void)!write(report[1], &n, sizeof n);
    (void)!write(report[1], got.data(), got.size());
    _exit(0);
  }
  std::thread relay(feed, &parents, kTotal, 16 * 1024, TcpPrefix::Then::kEnd);
  std::vector<uint8_t> mine = read_all(&parents);
  relay.join();
  uint64_t n = 0;
  ASSERT_EQ(read(report[0], &n, sizeof n), static_cast<ssize_t>(sizeof n));
  std::vector<uint8_t> theirs(n);
  for (size_t done = 0; done < n;) {
    ssize_t k = read(report[0], theirs.data() + done, n - done);
    ASSERT_GT(k, 0);
    done += static_cast<size_t>(k);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(mine.size() + theirs.size(), kTotal);  // each byte once
  ASSERT_EQ(mine.size() % 4, 0u);
  ASSERT_EQ(theirs.size() % 4, 0u);
  std::vector<bool> seen(kTotal / 4);
  for (const std::vector<uint8_t>* reader : {&mine, &theirs}) {
    std::vector<uint32_t> taken = counters(*reader);
    for (size_t i = 0; i < taken.size(); ++i) {
      ASSERT_LT(taken[i], kTotal / 4);
      if (i > 0) {
        ASSERT_GT(taken[i], taken[i - 1]) << "a reader's bytes out of order";
      }
      ASSERT_FALSE(seen[taken[i]]) << "a counter read twice";
      seen[taken[i]] = true;
    }
  }
  EXPECT_GT(theirs.size(), 0u);  // both took some (not a test of fairness: a sanity check)
  close(report[0]);
  close(report[1]);
}

TEST(RelayQueue, AnErrorIsReadOnceAfterTheBytesThenTheEnd) {
  TcpPrefix queue;
  ASSERT_TRUE(queue.start_relay(4096));
  feed(&queue, 1000, 4096, TcpPrefix::Then::kError);
  uint8_t buffer[2000];
  iovec into{buffer, sizeof buffer};
  bool at_end = false;
  EXPECT_EQ(queue.take_error(), 0);  // bytes first
  EXPECT_EQ(queue.take(&into, 1, false, &at_end), 1000u);
  EXPECT_FALSE(at_end);
  EXPECT_EQ(queue.take_error(), ECONNRESET);
  EXPECT_EQ(queue.take_error(), 0);
  EXPECT_EQ(queue.take(&into, 1, false, &at_end), 0u);
  EXPECT_TRUE(at_end);
}

TEST(RelayQueue, AMoveBackAddsItsBytesAfterTheRelaysAndEndsTheFeeding) {
  TcpPrefix queue;
  ASSERT_TRUE(queue.start_relay(8192));
  {
    std::lock_guard feeding(queue.feed_lock());
    iovec space[2];
    ASSERT_EQ(queue.feed_space(space, 4096), 1);
    std::memset(space[0].iov_base, 'a', 100);
    queue.commit(100);
  }
  std::vector<uint8_t> rest(8192 - 100, 'b');
  EXPECT_FALSE(queue.set_shared(std::vector<uint8_t>(8192 - 99, 'b'), false));  // more than the ring holds
  ASSERT_TRUE(queue.set_shared(rest, false));
  EXPECT_FALSE(queue.fed());
  std::vector<uint8_t> got(9000);
  iovec into{got.data(), got.size()};
  bool at_end = false;
  ASSERT_EQ(queue.take(&into, 1, false, &at_end), 8192u);
  EXPECT_EQ(got[99], 'a');
  EXPECT_EQ(got[100], 'b');
  EXPECT_FALSE(at_end);
  EXPECT_FALSE(queue.present());  // the kernel's bytes follow
}

TEST(RelayQueue, AReaderLearnsThatTheFeederWasKilled) {
  int ends[2];
  ASSERT_TRUE(open_fork_channel(ends));
  pid_t feeder = fork();
  ASSERT_GE(feeder, 0);
  if (feeder == 0) {
    // The relay's process: answers with its queue over the fork channel, then dies without a word.
    TcpPrefix queue;
    if (!queue.start_relay(4096)) _exit(2);
    HandBack answer;
    answer.outcome = HandBack::Outcome::kRelayed;
    answer.shared_prefix = queue.shareable();
    answer.relay_wake = queue.wake();
    _exit(send_answer(ends[0], 7, answer) ? 0 : 3);
  }
  uint64_t serial = 0;
  HandBack got;
  ASSERT_EQ(receive_message(ends[1], 5000, &serial, &got), ChannelMessage::kAnswer);
  EXPECT_EQ(serial, 7u);
  ASSERT_EQ(got.outcome, HandBack::Outcome::kRelayed);
  ASSERT_TRUE(got.shared_prefix && got.relay_wake);
  int status = 0;
  ASSERT_EQ(waitpid(feeder, &status, 0), feeder);
  ASSERT_EQ(WEXITSTATUS(status), 0);
  TcpPrefix childs;
  ASSERT_TRUE(keep_answer_prefix(got, &childs));
  EXPECT_TRUE(childs.fed());
  EXPECT_EQ(childs.wait_for_bytes(50), 0);
  EXPECT_TRUE(childs.feeder_gone());
  close(ends[0]);
  close(ends[1]);
}

TEST(RelayQueue, AClaimSaysWhetherItOnlyReads) {
  int ends[2];
  ASSERT_TRUE(open_fork_channel(ends));
  ASSERT_TRUE(send_claim(ends[1], 5, /*reading=*/true));
  ASSERT_TRUE(send_claim(ends[1], 6, /*reading=*/false));
  uint64_t serial = 0;
  HandBack claim;
  ASSERT_EQ(receive_message(ends[0], 1000, &serial, &claim), ChannelMessage::kClaim);
  EXPECT_EQ(serial, 5u);
  EXPECT_EQ(claim.outcome, HandBack::Outcome::kRelayed);
  ASSERT_EQ(receive_message(ends[0], 1000, &serial, &claim), ChannelMessage::kClaim);
  EXPECT_EQ(serial, 6u);
  EXPECT_NE(claim.outcome, HandBack::Outcome::kRelayed);
  // A relayed answer without its eventfd is refused by the sender, never half sent.
  HandBack broken;
  broken.outcome = HandBack::Outcome::kRelayed;
  EXPECT_FALSE(send_answer(ends[0], 9, broken));
  close(ends[0]);
  close(ends[1]);
}

}  // namespace
}  // namespace tcp2rdma::preload
