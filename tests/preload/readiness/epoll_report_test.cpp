// The epoll translation (readiness/epoll_report.h, readiness/stream_events.h) on the host, no RDMA:
// which of a set's registrations epoll_wait reports, with the application's events and data, given
// what each stream has, and which records the kernel said fired with which news.
#include "readiness/epoll_report.h"

#include <poll.h>
#include <sys/epoll.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <vector>

#include "rdma_stream.h"
#include "readiness/stream_events.h"

namespace tcp2rdma::preload::epoll_detail {
namespace {

// What each entry's stream "has", as the test says; and the records that fire, with the entries
// their news names (a record of another set stands for nothing here, as epoll_wait's expand says).
std::map<const Entry*, Look> g_streams;
struct FakeRecord {
  int epfd = 100;
  std::vector<Entry*> news;
};

Look look(const Entry& e) {
  auto it = g_streams.find(&e);
  return it == g_streams.end() ? Look{} : it->second;
}

// Records are told from the application's data by a tag in the low bits of their address: the
// test's own convention (FakeRecord objects are 8-aligned; the application's data below are odd).
bool expand(const void* data, int epfd, std::vector<Entry*>* looks) {
  auto bits = reinterpret_cast<uintptr_t>(data);
  if ((bits & 1) != 0 || data == nullptr) return false;
  auto* r = static_cast<FakeRecord*>(const_cast<void*>(data));
  if (r->epfd != epfd) return true;  // ours, but of another set (retired and reused): nothing here
  looks->insert(looks->end(), r->news.begin(), r->news.end());
  return true;
}

Entry entry(int fd, uint32_t events, uint64_t data) {
  Entry e{};
  e.epfd = 100;
  e.fd = fd;
  e.events = events;
  e.data.u64 = data;
  return e;
}

// The kernel's event for a record: its data is the record's address.
epoll_event fired(FakeRecord* r) {
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.ptr = r;
  return ev;
}

epoll_event own_event(uint32_t events, uint64_t data) {
  epoll_event ev{};
  ev.events = events;
  ev.data.u64 = data;  // odd: the application's own descriptor
  return ev;
}

class EpollReportTest : public ::testing::Test {
 protected:
  void SetUp() override { g_streams.clear(); }
  epoll_event events[8]{};
  EpollReport report;
};

TEST_F(EpollReportTest, AFiredRecordReportsTheEntriesItsNewsNamesWithTheApplicationsEventsAndData) {
  Entry ready = entry(5, EPOLLIN, 55), edge = entry(7, EPOLLIN | EPOLLOUT | EPOLLET, 77), quiet = entry(8, EPOLLIN, 88);
  g_streams[&ready] = {EPOLLIN, false};
  g_streams[&edge] = {EPOLLOUT, false};
  g_streams[&quiet] = {EPOLLIN, false};  // ready, but without news: not looked at
  FakeRecord record{100, {&ready, &edge}};
  report.start(events, 8, look);
  events[0] = fired(&record);
  report.translate_fired(1, 100, expand);
  ASSERT_EQ(report.count(), 2);
  EXPECT_EQ(events[0].events, static_cast<uint32_t>(EPOLLIN));
  EXPECT_EQ(events[0].data.u64, 55u);  // the application's data, not our record's address
  EXPECT_EQ(events[1].events, static_cast<uint32_t>(EPOLLOUT));
  EXPECT_EQ(events[1].data.u64, 77u);
  ASSERT_EQ(report.reported().size(), 2u);
}

TEST_F(EpollReportTest, NewsWithNothingTheApplicationAskedForIsNotReported) {
  // News comes for every change, e.g. credits that came back while only EPOLLIN was asked.
  Entry e = entry(5, EPOLLIN | EPOLLET, 55);
  g_streams[&e] = {0, false};
  FakeRecord record{100, {&e}};
  report.start(events, 8, look);
  events[0] = fired(&record);
  report.translate_fired(1, 100, expand);
  EXPECT_EQ(report.count(), 0);
}

TEST_F(EpollReportTest, TheApplicationsOwnDescriptorsPassAndAnotherSetsRecordIsDropped) {
  Entry live = entry(5, EPOLLIN | EPOLLET, 55), elsewhere = entry(6, EPOLLIN, 66);
  g_streams[&live] = {EPOLLIN, false};
  g_streams[&elsewhere] = {EPOLLIN, false};
  FakeRecord mine{100, {&live}};
  // Retired from set 100 and reused for set 200 while a thread of set 100 slept in the kernel, which
  // then brought back the record's old event: neither set 100's registrations nor the application's.
  FakeRecord reused{200, {&elsewhere}};
  report.start(events, 8, look);
  events[0] = fired(&reused);
  events[1] = own_event(EPOLLOUT, 0xabcdef);  // a pipe the application registered itself
  events[2] = fired(&mine);
  report.translate_fired(3, 100, expand);
  ASSERT_EQ(report.count(), 2);
  EXPECT_EQ(events[0].data.u64, 0xabcdefu);
  EXPECT_EQ(events[0].events, static_cast<uint32_t>(EPOLLOUT));
  EXPECT_EQ(events[1].data.u64, 55u);
}

TEST_F(EpollReportTest, AOneShotRegistrationIsReportedOnceThenDisarmed) {
  Entry e = entry(5, EPOLLIN | EPOLLONESHOT, 55);
  g_streams[&e] = {EPOLLIN, false};
  FakeRecord record{100, {&e}};
  report.start(events, 8, look);
  events[0] = fired(&record);
  report.translate_fired(1, 100, expand);
  ASSERT_EQ(report.count(), 1);
  EXPECT_TRUE(e.disabled);
  report.start(events, 8, look);  // the next wait: disarmed until EPOLL_CTL_MOD
  events[0] = fired(&record);
  report.translate_fired(1, 100, expand);
  EXPECT_EQ(report.count(), 0);
}

TEST_F(EpollReportTest, NewsBeyondMaxeventsIsLeftForTheNextWaitAndTheApplicationsOwnEventsAllPass) {
  // Two slots: the kernel gave a record and the application's own edge-triggered pipe. The pipe's
  // event must not be lost to the record's three ready entries (the kernel will not give it again).
  Entry a = entry(5, EPOLLIN, 55), b = entry(6, EPOLLIN, 66), c = entry(7, EPOLLIN, 77);
  for (Entry* e : {&a, &b, &c}) g_streams[e] = {EPOLLIN, false};
  FakeRecord record{100, {&a, &b, &c}};
  report.start(events, 2, look);
  events[0] = fired(&record);
  events[1] = own_event(EPOLLIN | EPOLLET, 0x1235);
  report.translate_fired(2, 100, expand);
  ASSERT_EQ(report.count(), 2);
  EXPECT_EQ(events[0].data.u64, 0x1235u);
  EXPECT_EQ(events[1].data.u64, 55u);
  ASSERT_EQ(report.unlooked().size(), 2u);
  EXPECT_EQ(report.unlooked()[0], &b);
  EXPECT_EQ(report.unlooked()[1], &c);
  EXPECT_TRUE(report.full());
  report.report_unfired(own_event(EPOLLIN, 0x1237));
  EXPECT_EQ(report.count(), 2);
}

TEST_F(EpollReportTest, AConnectionGoneBackToTcpIsHandedBackNotReported) {
  Entry level = entry(5, EPOLLIN, 55), edge = entry(6, EPOLLIN | EPOLLET, 66);
  g_streams[&level] = {EPOLLIN, true};
  g_streams[&edge] = {EPOLLIN, true};
  FakeRecord record{100, {&level, &edge}};
  report.start(events, 8, look);
  events[0] = fired(&record);
  report.translate_fired(1, 100, expand);
  EXPECT_EQ(report.count(), 0);
  ASSERT_EQ(report.take_gone().size(), 2u);
  EXPECT_EQ(report.take_gone()[0], &level);
  EXPECT_EQ(report.take_gone()[1], &edge);
}

TEST_F(EpollReportTest, AReportedPrefixTakesTheKernelsEventsForTheSameSocketIntoOneReport) {
  // A socket back on TCP with a prefix is readable for it; the kernel may report the socket's
  // writability in the same wait: one event, both.
  report.start(events, 8, look);
  report.report_unfired(own_event(EPOLLIN, 43));
  events[1] = own_event(EPOLLOUT, 43);
  report.translate_fired(1, 100, expand);
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
