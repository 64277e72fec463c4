// The epoll translation (readiness/epoll_report.h, readiness/stream_events.h) on the host, no RDMA:
// which of a set's registrations epoll_wait reports, with the application's events and data, given
// what each stream has and what the kernel said of the readiness fds.
#include "readiness/epoll_report.h"

#include <poll.h>
#include <sys/epoll.h>

#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "rdma_stream.h"
#include "readiness/stream_events.h"

namespace tcp2rdma::preload::epoll_detail {
namespace {

// What each entry's stream "has", as the test says; and the addresses that are ours but retired.
std::map<const Entry*, Look> g_streams;
std::vector<const void*> g_retired;

Look look(const Entry& e) {
  auto it = g_streams.find(&e);
  return it == g_streams.end() ? Look{} : it->second;
}
bool ours(const void* data) {
  for (const void* r : g_retired) {
    if (r == data) return true;
  }
  for (const auto& [e, l] : g_streams) {
    if (e == data) return true;
  }
  return false;
}

Entry* live_entry(const void* data) {
  for (const auto& [e, l] : g_streams) {
    if (e == data) return const_cast<Entry*>(e);
  }
  return nullptr;
}

Entry entry(int fd, uint32_t events, uint64_t data) {
  Entry e{};
  e.epfd = 100;
  e.fd = fd;
  e.readiness_fd = 1000 + fd;
  e.events = events;
  e.data.u64 = data;
  return e;
}

// The kernel's event for an entry's readiness fd: its data is the entry's address.
epoll_event fired(Entry* e) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = e;
  return ev;
}

class EpollReportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    g_streams.clear();
    g_retired.clear();
  }
  epoll_event events[8]{};
  EpollReport report;
};

TEST_F(EpollReportTest, AReadyLevelTriggeredRegistrationIsReportedWithoutAKernelEvent) {
  Entry ready = entry(5, EPOLLIN, 55), idle = entry(6, EPOLLIN, 66), edge = entry(7, EPOLLIN | EPOLLET, 77);
  g_streams[&ready] = {EPOLLIN, false};
  g_streams[&idle] = {0, false};
  g_streams[&edge] = {EPOLLIN, false};  // ready, but its event is its fd's to give
  std::vector<Entry*> mine{&ready, &idle, &edge};
  report.start(events, 8, look);
  report.report_level_triggered(mine);
  ASSERT_EQ(report.count(), 1);
  EXPECT_EQ(events[0].events, static_cast<uint32_t>(EPOLLIN));
  EXPECT_EQ(events[0].data.u64, 55u);  // the application's data, not our entry's address
  ASSERT_EQ(report.reported().size(), 1u);
  EXPECT_EQ(report.reported()[0], &ready);
}

TEST_F(EpollReportTest, AFiredRegistrationIsReportedWithTheApplicationsEventsAndData) {
  Entry edge = entry(7, EPOLLIN | EPOLLOUT | EPOLLET, 77);
  g_streams[&edge] = {EPOLLOUT, false};
  std::vector<Entry*> mine{&edge};
  report.start(events, 8, look);
  report.report_level_triggered(mine);
  ASSERT_EQ(report.count(), 0);
  events[0] = fired(&edge);
  report.translate_fired(1, 100, live_entry, ours);
  ASSERT_EQ(report.count(), 1);
  EXPECT_EQ(events[0].events, static_cast<uint32_t>(EPOLLOUT));
  EXPECT_EQ(events[0].data.u64, 77u);
}

TEST_F(EpollReportTest, AFiringWithNothingTheApplicationAskedForIsNotReported) {
  // A readiness fd fires for every change, e.g. credits that came back while only EPOLLIN was asked.
  Entry e = entry(5, EPOLLIN | EPOLLET, 55);
  g_streams[&e] = {0, false};
  std::vector<Entry*> mine{&e};
  report.start(events, 8, look);
  events[0] = fired(&e);
  report.translate_fired(1, 100, live_entry, ours);
  EXPECT_EQ(report.count(), 0);
}

TEST_F(EpollReportTest, TheApplicationsOwnDescriptorsPassAndRetiredEntriesAreDropped) {
  Entry live = entry(5, EPOLLIN | EPOLLET, 55);
  Entry retired = entry(6, EPOLLIN, 66);
  g_streams[&live] = {EPOLLIN, false};
  g_retired.push_back(&retired);
  std::vector<Entry*> mine{&live};
  report.start(events, 8, look);
  epoll_event own{};
  own.events = EPOLLOUT;
  own.data.u64 = 0xabcdef;  // a pipe the application registered itself
  events[0] = fired(&retired);  // a thread woke with an entry erased meanwhile: never the application's
  events[1] = own;
  events[2] = fired(&live);
  report.translate_fired(3, 100, live_entry, ours);
  ASSERT_EQ(report.count(), 2);
  EXPECT_EQ(events[0].data.u64, 0xabcdefu);
  EXPECT_EQ(events[0].events, static_cast<uint32_t>(EPOLLOUT));
  EXPECT_EQ(events[1].data.u64, 55u);
}

TEST_F(EpollReportTest, ARegistrationIsReportedOncePerWaitEvenWhenItAlsoFired) {
  Entry e = entry(5, EPOLLIN, 55);
  g_streams[&e] = {EPOLLIN, false};
  std::vector<Entry*> mine{&e};
  report.start(events, 8, look);
  report.report_level_triggered(mine);
  ASSERT_EQ(report.count(), 1);
  events[1] = fired(&e);
  report.translate_fired(1, 100, live_entry, ours);
  EXPECT_EQ(report.count(), 1);
}

TEST_F(EpollReportTest, AOneShotRegistrationIsReportedOnceThenDisarmed) {
  Entry e = entry(5, EPOLLIN | EPOLLONESHOT, 55);
  g_streams[&e] = {EPOLLIN, false};
  std::vector<Entry*> mine{&e};
  report.start(events, 8, look);
  report.report_level_triggered(mine);
  ASSERT_EQ(report.count(), 1);
  EXPECT_TRUE(e.disabled);
  report.start(events, 8, look);  // the next wait: disarmed until EPOLL_CTL_MOD
  report.report_level_triggered(mine);
  events[0] = fired(&e);
  report.translate_fired(1, 100, live_entry, ours);
  EXPECT_EQ(report.count(), 0);
}

TEST_F(EpollReportTest, NoMoreThanMaxeventsAreReported) {
  Entry a = entry(5, EPOLLIN, 55), b = entry(6, EPOLLIN, 66), c = entry(7, EPOLLIN, 77);
  for (Entry* e : {&a, &b, &c}) g_streams[e] = {EPOLLIN, false};
  std::vector<Entry*> mine{&a, &b, &c};
  report.start(events, 2, look);
  report.report_level_triggered(mine);
  EXPECT_EQ(report.count(), 2);
  EXPECT_TRUE(report.full());
  epoll_event prefix{EPOLLIN, {}};
  report.report_unfired(prefix);
  EXPECT_EQ(report.count(), 2);
  EXPECT_FALSE(c.disabled);
}

TEST_F(EpollReportTest, AConnectionGoneBackToTcpIsHandedBackNotReported) {
  Entry level = entry(5, EPOLLIN, 55), edge = entry(6, EPOLLIN | EPOLLET, 66);
  g_streams[&level] = {EPOLLIN, true};
  g_streams[&edge] = {EPOLLIN, true};
  std::vector<Entry*> mine{&level, &edge};
  report.start(events, 8, look);
  report.report_level_triggered(mine);
  EXPECT_EQ(report.count(), 0);
  ASSERT_EQ(report.take_gone().size(), 1u);
  EXPECT_EQ(report.take_gone()[0], &level);
  report.take_gone().clear();
  events[0] = fired(&edge);
  report.translate_fired(1, 100, live_entry, ours);
  EXPECT_EQ(report.count(), 0);
  ASSERT_EQ(report.take_gone().size(), 1u);
  EXPECT_EQ(report.take_gone()[0], &edge);
}

TEST_F(EpollReportTest, AnEntryReusedForAnotherSetIsDroppedWhereItFiredBefore) {
  // Erased from set 100 and reused for set 200 while a thread of set 100 slept in the kernel, which
  // then brought back the entry's old event: it is neither set 100's registration nor the application's.
  Entry moved = entry(9, EPOLLIN, 99);
  moved.epfd = 200;
  g_streams[&moved] = {EPOLLIN, false};
  report.start(events, 8, look);
  events[0] = fired(&moved);
  report.translate_fired(1, 100, live_entry, ours);
  EXPECT_EQ(report.count(), 0);
}

TEST_F(EpollReportTest, AReportedPrefixTakesTheKernelsEventsForTheSameSocketIntoOneReport) {
  // A socket back on TCP with a prefix is readable for it; the kernel may report the socket's
  // writability in the same wait: one event, both.
  report.start(events, 8, look);
  epoll_event prefix{};
  prefix.events = EPOLLIN;
  prefix.data.u64 = 42;
  report.report_unfired(prefix);
  epoll_event kernel{};
  kernel.events = EPOLLOUT;
  kernel.data.u64 = 42;
  events[1] = kernel;
  report.translate_fired(1, 100, live_entry, ours);
  ASSERT_EQ(report.count(), 1);
  EXPECT_EQ(events[0].events, static_cast<uint32_t>(EPOLLIN | EPOLLOUT));
}

// The stream's state in poll(2) terms, as a kernel socket in the same state reports it.
TEST(StreamEvents, AStreamIsReportedAsASocketInTheSameStateWouldBe) {
  transport::Readiness r;
  EXPECT_EQ(poll_events_of(r, POLLIN | POLLOUT), 0);
  r.readable = true;
  EXPECT_EQ(poll_events_of(r, POLLIN | POLLOUT), POLLIN);
  EXPECT_EQ(poll_events_of(r, POLLOUT), 0);  // only what was asked
  r.writable = true;
  EXPECT_EQ(poll_events_of(r, POLLIN | POLLOUT), POLLIN | POLLOUT);
  r = {};
  r.readable = r.peer_closed = true;  // the peer's end: readable (read returns 0), and RDHUP if asked
  EXPECT_EQ(poll_events_of(r, POLLIN), POLLIN);
  EXPECT_EQ(poll_events_of(r, POLLIN | POLLRDHUP), POLLIN | POLLRDHUP);
  r = {};
  r.readable = r.failed = true;  // a reset: ERR and HUP whatever was asked, as the kernel says
  EXPECT_EQ(poll_events_of(r, 0), POLLERR | POLLHUP);
  EXPECT_EQ(poll_events_of(r, POLLIN | POLLRDHUP), POLLIN | POLLRDHUP | POLLERR | POLLHUP);
}

}  // namespace
}  // namespace tcp2rdma::preload::epoll_detail
