// ChannelQueue (transport/channel_queue.h): the channels of a link with something due, each once.
#include "channel_queue.h"

#include <gtest/gtest.h>

#include <vector>

namespace tcp2rdma::transport {
namespace {

TEST(ChannelQueue, EachIndexIsQueuedOnceUntilTaken) {
  ChannelQueue q;
  EXPECT_TRUE(q.empty());
  q.add(7);
  q.add(3);
  q.add(7);
  std::vector<uint32_t> got;
  q.take(got);
  EXPECT_EQ(got, (std::vector<uint32_t>{7, 3}));
  EXPECT_TRUE(q.empty());
  // Taken, an index may be queued again (serving one channel may touch it anew).
  q.add(7);
  q.take(got);
  EXPECT_EQ(got, (std::vector<uint32_t>{7}));
}

TEST(ChannelQueue, TakeDropsWhatTheOutputHeld) {
  ChannelQueue q;
  std::vector<uint32_t> got{1, 2, 3};
  q.take(got);
  EXPECT_TRUE(got.empty());
  q.add(16383);  // the largest channel index a link has
  q.take(got);
  EXPECT_EQ(got, (std::vector<uint32_t>{16383}));
}

}  // namespace
}  // namespace tcp2rdma::transport
