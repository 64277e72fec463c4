// Servers that lately refused RDMA (upgrade/refusals.h): remembered by address and port, for 1 s and
// then twice as long at each further refusal, forgotten at an RDMA connection.
#include "upgrade/refusals.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "test_sockets.h"

namespace tcp2rdma::preload {
namespace {

using std::chrono::milliseconds;

sockaddr_storage server(const char* ip, uint16_t port) {
  sockaddr_storage s{};
  if (inet_pton(AF_INET6, ip, &reinterpret_cast<sockaddr_in6&>(s).sin6_addr) == 1) {
    s.ss_family = AF_INET6;
    reinterpret_cast<sockaddr_in6&>(s).sin6_port = htons(port);
  } else {
    s.ss_family = AF_INET;
    inet_pton(AF_INET, ip, &reinterpret_cast<sockaddr_in&>(s).sin_addr);
    reinterpret_cast<sockaddr_in&>(s).sin_port = htons(port);
  }
  return s;
}

TEST(Refusals, ASecondRefusalDoublesThePauseAndAnAcceptanceForgetsIt) {
  sockaddr_storage a = server("10.77.0.1", 6001);
  EXPECT_EQ(refused_for(a), milliseconds(0));
  note_refusal(a);
  EXPECT_GT(refused_for(a), milliseconds(900));
  EXPECT_LE(refused_for(a), milliseconds(1000));
  note_refusal(a);
  EXPECT_GT(refused_for(a), milliseconds(1900));
  EXPECT_LE(refused_for(a), milliseconds(2000));
  note_acceptance(a);
  EXPECT_EQ(refused_for(a), milliseconds(0));
  note_refusal(a);  // and it starts again from 1 s
  EXPECT_LE(refused_for(a), milliseconds(1000));
  note_acceptance(a);
}

TEST(Refusals, ThePauseStopsGrowingAt64Seconds) {
  sockaddr_storage a = server("fd00::1", 6002);
  for (int i = 0; i < 12; ++i) note_refusal(a);
  EXPECT_GT(refused_for(a), milliseconds(63000));
  EXPECT_LE(refused_for(a), milliseconds(64000));
  note_acceptance(a);
}

TEST(Refusals, OtherPortsAndAddressesAreNotTaken) {
  sockaddr_storage a = server("10.77.0.1", 6003);
  note_refusal(a);
  EXPECT_EQ(refused_for(server("10.77.0.1", 6004)), milliseconds(0));
  EXPECT_EQ(refused_for(server("10.77.0.2", 6003)), milliseconds(0));
  EXPECT_EQ(refused_for(server("::ffff:10.77.0.1", 6003)), milliseconds(0));  // another family: another key
  note_acceptance(a);
}

using transport::DeclineReason;
using transport::Status;

// A client's failed attempt on a live connection: the server's silence, or a no it would give again,
// is remembered; a no about this connection's timing is not.
TEST(Refusals, SilenceOrANoTheServerWouldRepeatIsRememberedANoAboutTimingIsNot) {
  int client = -1, server_end = -1;
  ASSERT_TRUE(test::loopback_connection(&client, &server_end));
  EXPECT_TRUE(refusal_to_remember(client, false, Status::kTimeout, DeclineReason::kNone));
  EXPECT_TRUE(refusal_to_remember(client, false, Status::kRejected, DeclineReason::kNone));  // no listener
  EXPECT_TRUE(refusal_to_remember(client, false, Status::kRejected, DeclineReason::kServerStaysTcp));
  EXPECT_TRUE(refusal_to_remember(client, false, Status::kRejected, DeclineReason::kMemoryLock));
  for (DeclineReason timing : {DeclineReason::kBusy, DeclineReason::kExpired, DeclineReason::kTooLate,
                               DeclineReason::kDuplicate}) {
    EXPECT_FALSE(refusal_to_remember(client, false, Status::kRejected, timing));
  }
  close(client);
  close(server_end);
}

// An attempt for a connection that ended meanwhile says nothing of the server: settled here (closed,
// forked or exec'd away), or closed by the server's end, whose process may have taken its RDMA
// listener along (seen: inetd's services, each ending as its client's bytes were echoed, put the
// server aside for the connections after them).
TEST(Refusals, AnAnswerForAConnectionThatEndedIsNotRemembered) {
  int client = -1, server_end = -1;
  ASSERT_TRUE(test::loopback_connection(&client, &server_end));
  EXPECT_FALSE(refusal_to_remember(client, true, Status::kTimeout, DeclineReason::kNone));
  close(server_end);
  pollfd p{client, POLLRDHUP, 0};
  ASSERT_EQ(poll(&p, 1, 2000), 1);  // the server's FIN has come
  EXPECT_FALSE(refusal_to_remember(client, false, Status::kTimeout, DeclineReason::kNone));
  EXPECT_FALSE(refusal_to_remember(client, false, Status::kRejected, DeclineReason::kNone));
  close(client);
}

}  // namespace
}  // namespace tcp2rdma::preload
