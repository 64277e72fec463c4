// The rule's tunables become the transport's options (preload/upgrade.cpp): rounded and clamped into
// what the transport and its wire format accept, whatever a rule file says.
#include <gtest/gtest.h>

#include "options.h"
#include "registry/connection_policy.h"
#include "stream_listener.h"

namespace tcp2rdma::preload {
namespace {

TEST(UpgradeOptions, DefaultsMapOneToOne) {
  transport::StreamOptions s = stream_options(config::ConnectionOptions{});
  EXPECT_EQ(s.ring_size_log2, 20u);  // 1 MiB
  EXPECT_EQ(s.recv_queue_depth, 128);
  EXPECT_GE(s.send_queue_depth, 2 * s.recv_queue_depth);
  EXPECT_EQ(s.timeout_ms, 5000);  // the whole upgrade's time (upgrade_timeout 5s > connect_timeout 2s)
  EXPECT_EQ(s.zcopy_threshold, 64u * 1024);
  EXPECT_EQ(s.inline_threshold, 64u);
  EXPECT_EQ(s.keepalive_ms, 10000);
  EXPECT_TRUE(transport::valid_options(s));
}

TEST(UpgradeOptions, SizesAreRoundedUpToAPowerOfTwoAndClamped) {
  config::ConnectionOptions o;
  o.buffer_size = 3000;
  EXPECT_EQ(stream_options(o).ring_size_log2, 12u);
  o.buffer_size = 1;
  EXPECT_EQ(stream_options(o).ring_size_log2, 10u);
  o.buffer_size = config::kMiB * 1024;  // 1 GiB: beyond what one immediate can count
  EXPECT_EQ(stream_options(o).ring_size_log2, 29u);
}

TEST(UpgradeOptions, EveryMappingIsValidForTheTransport) {
  for (uint64_t buffer : {uint64_t{4096}, config::kMiB, config::kMiB * 1024}) {
    for (uint32_t recv : {1u, 4u, 64u, 255u, 256u, 100000u}) {
      for (uint32_t send : {1u, 128u, 65535u, 100000u}) {
        config::ConnectionOptions o;
        o.buffer_size = buffer;
        o.recv_queue_depth = recv;
        o.send_queue_depth = send;
        o.link_channels = recv;  // 1 to 100000: a link is sized for 1 to 16384 channels
        transport::StreamOptions s = stream_options(o);
        EXPECT_TRUE(transport::valid_options(s)) << buffer << " " << recv << " " << send;
        EXPECT_GE(s.link_channels, 1);
        EXPECT_LE(s.link_channels, 16384);
        EXPECT_LE(s.recv_queue_depth, 255);  // the setup carries it in one byte
        EXPECT_GE(s.send_queue_depth, std::min<uint32_t>(send, 65535));  // never wrapped to a small depth
      }
    }
  }
}

}  // namespace
}  // namespace tcp2rdma::preload
