// SentLedger (transport/sent_ledger.h): what of a channel's data is acknowledged, and from where the
// bounce mirror holds it, as its sends complete in order; what a failover resends follows from it.
#include "sent_ledger.h"

#include <gtest/gtest.h>

namespace tcp2rdma::transport {
namespace {

TEST(SentLedger, EachCompletionAcknowledgesTheOldestMessage) {
  SentLedger ledger;
  ledger.start(1000, 4);
  ledger.posted(1100, false);
  ledger.posted(1300, false);
  EXPECT_EQ(ledger.in_flight(), 2);
  EXPECT_EQ(ledger.acked(), 1000u);
  ledger.completed(false, true);
  EXPECT_EQ(ledger.acked(), 1100u);
  ledger.completed(false, true);
  EXPECT_EQ(ledger.acked(), 1300u);
  EXPECT_EQ(ledger.in_flight(), 0);
  // Copied messages leave their bytes in the mirror: it still holds them from the start.
  EXPECT_EQ(ledger.retained_from(), 1000u);
}

TEST(SentLedger, AnAcknowledgedZeroCopyMessageIsNoLongerInTheMirror) {
  SentLedger ledger;
  ledger.start(0, 4);
  ledger.posted(64, false);
  ledger.posted(64 + 65536, true);
  EXPECT_EQ(ledger.zero_copy_in_flight(), 1);
  ledger.completed(false, true);
  EXPECT_EQ(ledger.retained_from(), 0u);
  ledger.completed(true, true);
  EXPECT_EQ(ledger.zero_copy_in_flight(), 0);
  EXPECT_EQ(ledger.acked(), 64u + 65536);
  EXPECT_EQ(ledger.retained_from(), 64u + 65536);  // the caller's buffer held them, and the peer has them
}

TEST(SentLedger, AFailedCompletionAcknowledgesNothing) {
  SentLedger ledger;
  ledger.start(500, 2);
  ledger.posted(600, true);
  ledger.posted(700, false);
  ledger.completed(true, false);  // flushed or retried out: the peer may not have it
  EXPECT_EQ(ledger.zero_copy_in_flight(), 0);
  EXPECT_EQ(ledger.acked(), 500u);
  EXPECT_EQ(ledger.retained_from(), 500u);
  ledger.completed(false, false);
  EXPECT_EQ(ledger.in_flight(), 0);
  EXPECT_EQ(ledger.acked(), 500u);
  ledger.completed(false, true);  // a completion with nothing in flight changes nothing
  EXPECT_EQ(ledger.acked(), 500u);
}

TEST(SentLedger, TheCircleWrapsAndCursorsWrapWithTheStream) {
  SentLedger ledger;
  uint64_t near_end = ~uint64_t{0} - 50;  // cursors count modulo 2^64 (stream_cursor_origin)
  ledger.start(near_end, 3);
  uint64_t end = near_end;
  for (int round = 0; round < 10; ++round) {
    ledger.posted(end + 40, false);
    ledger.posted(end + 80, round % 2 == 0);
    ledger.completed(false, true);
    ledger.completed(round % 2 == 0, true);
    end += 80;
    EXPECT_EQ(ledger.acked(), end);
  }
  EXPECT_EQ(ledger.retained_from(), end - 80);  // the last zero-copy message's end (round 8)
}

}  // namespace
}  // namespace tcp2rdma::transport
