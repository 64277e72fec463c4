// The arithmetic of the exchange on TCP after the RDMA path failed (transport/path_failover.h): what
// each side resends, what it may believe of the peer, with cursors anywhere, across 2^64 too.
#include "path_failover.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace tcp2rdma::transport {
namespace {

constexpr uint64_t kRing = 1 << 20;

// Cursors that start at `origin`, as a stream's start wherever its nonces put them.
class PathFailover : public ::testing::TestWithParam<uint64_t> {
 protected:
  uint64_t at(uint64_t offset) const { return GetParam() + offset; }
};

TEST_P(PathFailover, TheSenderResendsFromWhereThePeerHasItToItsEnd) {
  SentCursors ours{at(1000), at(1000), at(5000)};
  uint64_t resend = 99;
  EXPECT_EQ(bytes_to_resend(ours, at(3000), &resend), FailoverError::kNone);
  EXPECT_EQ(resend, 2000u);
  EXPECT_EQ(bytes_to_resend(ours, at(5000), &resend), FailoverError::kNone);  // it had everything
  EXPECT_EQ(resend, 0u);
  EXPECT_EQ(bytes_to_resend(ours, at(1000), &resend), FailoverError::kNone);  // nothing beyond what it read
  EXPECT_EQ(resend, 4000u);
}

TEST_P(PathFailover, APeerClaimingTheImpossibleIsRefused) {
  SentCursors ours{at(1000), at(1000), at(5000)};
  uint64_t resend = 99;
  // More than we ever sent: it would have us resend nothing and lose nothing it could prove.
  EXPECT_EQ(bytes_to_resend(ours, at(5001), &resend), FailoverError::kReceivedImpossible);
  EXPECT_EQ(resend, 0u);
  // Less than it told us it had consumed: it would have us send bytes it has read once more.
  EXPECT_EQ(bytes_to_resend(ours, at(999), &resend), FailoverError::kReceivedImpossible);
  EXPECT_EQ(bytes_to_resend(ours, GetParam() - kRing, &resend), FailoverError::kReceivedImpossible);
}

TEST_P(PathFailover, BytesNoLongerHeldCannotBeResent) {
  // A zero-copy write up to 3000 was acknowledged and its buffer handed back: only 3000..5000 is held.
  SentCursors ours{at(1000), at(3000), at(5000)};
  uint64_t resend = 99;
  EXPECT_EQ(bytes_to_resend(ours, at(2999), &resend), FailoverError::kNotRetained);
  EXPECT_EQ(bytes_to_resend(ours, at(3000), &resend), FailoverError::kNone);
  EXPECT_EQ(resend, 2000u);
}

TEST_P(PathFailover, TheReceiverExpectsWhatThePeerSentBeyondWhatArrived) {
  ReceivedCursors ours{at(100), at(700), kRing};
  uint64_t coming = 99;
  EXPECT_EQ(bytes_coming(ours, at(700), &coming), FailoverError::kNone);
  EXPECT_EQ(coming, 0u);
  EXPECT_EQ(bytes_coming(ours, at(100) + kRing, &coming), FailoverError::kNone);  // a full ring in flight
  EXPECT_EQ(coming, kRing - 600);
  // Beyond the ring it was given room in, or before what is already here: a lie.
  EXPECT_EQ(bytes_coming(ours, at(101) + kRing, &coming), FailoverError::kSentImpossible);
  EXPECT_EQ(coming, 0u);
  EXPECT_EQ(bytes_coming(ours, at(699), &coming), FailoverError::kSentImpossible);
}

// Cursors from zero, from the middle, and just before they wrap past 2^64.
INSTANTIATE_TEST_SUITE_P(Origins, PathFailover,
                         ::testing::Values(uint64_t{0}, uint64_t{0x123456789abcdef0}, UINT64_MAX - 2500));

TEST(PathFailoverWords, EveryErrorIsNamed) {
  for (FailoverError e : {FailoverError::kReceivedImpossible, FailoverError::kNotRetained, FailoverError::kSentImpossible}) {
    EXPECT_STRNE(to_string(e), "?");
  }
}

}  // namespace
}  // namespace tcp2rdma::transport
