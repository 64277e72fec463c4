// The stream API's semantics on real RDMA (GoogleTest, run inside the Soft-RoCE VM as one ctest):
// both ends live in this process, the client connecting from a second thread.
#include <gtest/gtest.h>
#include <poll.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include <future>
#include <string>
#include <thread>
#include <tuple>

#include "link_watch.h"
#include "peer_util.h"
#include "stream_sleeper.h"

namespace tcp2rdma::transport {
namespace {

using peer_util::fill;
using peer_util::first_difference;

const char* self_address() {
  const char* a = std::getenv("T2R_SELF");
  return a != nullptr ? a : "10.77.0.1";
}

StreamOptions small_options() {
  StreamOptions o;
  o.ring_size_log2 = 16;
  o.recv_queue_depth = 8;
  o.timeout_ms = 3000;
  return o;
}

Pairing pairing_for(uint16_t client_port, uint16_t server_port) {
  Pairing p;
  p.tuple.family = AF_INET;
  p.tuple.client_port = client_port;
  p.tuple.server_port = server_port;
  inet_pton(AF_INET, self_address(), p.tuple.client_addr);
  inet_pton(AF_INET, self_address(), p.tuple.server_addr);
  p.client_nonce = random_nonce();
  return p;
}

// A connected pair of streams.
struct Pair {
  std::unique_ptr<StreamListener> listener;
  std::unique_ptr<RdmaStream> client, server;
};

Pair connect_pair(uint16_t port, const StreamOptions& options = small_options()) {
  Pair p;
  std::string port_text = std::to_string(port);
  p.listener = peer_util::listen_on(port_text.c_str(), options);
  if (!p.listener) return p;
  auto client = std::async(std::launch::async, [&] { return peer_util::connect_to(self_address(), port_text.c_str(), options); });
  p.server = peer_util::accept_one(*p.listener, 20);
  p.client = client.get();
  return p;
}

Status write_text(RdmaStream& s, const std::string& text, int flags = 0) {
  iovec iov{const_cast<char*>(text.data()), text.size()};
  size_t done = 0;
  Status st = s.write(&iov, 1, flags, &done);
  return st == Status::kOk && done != text.size() ? Status::kWouldBlock : st;
}

std::string read_text(RdmaStream& s, size_t max, int flags, Status* status) {
  std::string buf(max, '\0');
  iovec iov{buf.data(), buf.size()};
  size_t done = 0;
  *status = s.read(&iov, 1, flags, &done);
  buf.resize(done);
  return buf;
}

TEST(StreamApi, NonBlockingReadOnAnEmptyStreamWouldBlock) {
  Pair p = connect_pair(7601);
  ASSERT_TRUE(p.client && p.server);
  Status st;
  EXPECT_EQ(read_text(*p.server, 10, kNonBlocking, &st), "");
  EXPECT_EQ(st, Status::kWouldBlock);
  Readiness r = p.server->readiness();
  EXPECT_FALSE(r.readable);
  EXPECT_TRUE(r.writable);
}

TEST(StreamApi, PeekLeavesTheBytesAndWaitAllFillsEveryBuffer) {
  Pair p = connect_pair(7602);
  ASSERT_TRUE(p.client && p.server);
  ASSERT_EQ(write_text(*p.client, "hello, "), Status::kOk);
  Status st;
  EXPECT_EQ(read_text(*p.server, 5, kPeek, &st), "hello");
  EXPECT_EQ(read_text(*p.server, 5, kPeek, &st), "hello");
  // Wait-all across two iovecs: the second half arrives later, from another thread.
  auto later = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    return write_text(*p.client, "world!");
  });
  char a[7], b[6];
  iovec iov[2] = {{a, sizeof a}, {b, sizeof b}};
  size_t done = 0;
  EXPECT_EQ(p.server->read(iov, 2, kWaitAll, &done), Status::kOk);
  EXPECT_EQ(done, 13u);
  EXPECT_EQ(std::string(a, 7) + std::string(b, 6), "hello, world!");
  EXPECT_EQ(later.get(), Status::kOk);
}

TEST(StreamApi, AWritevOfSmallPiecesIsOneMessageAndALargePieceBetweenThemGoesZeroCopy) {
  StreamOptions o = small_options();
  o.zcopy_threshold = 16 * 1024;
  Pair p = connect_pair(7646, o);
  ASSERT_TRUE(p.client && p.server);
  // A reply's header, an empty piece, its body and trailer: one inline message, as one write would be.
  std::string head = "VALUE key 0 5\r\n", body = "hello", tail = "\r\nEND\r\n";
  iovec reply[] = {{head.data(), head.size()}, {nullptr, 0}, {body.data(), body.size()}, {tail.data(), tail.size()}};
  const uint64_t inline_before = p.client->counters().inline_messages;
  size_t done = 0;
  ASSERT_EQ(p.client->write(reply, 4, 0, &done), Status::kOk);
  EXPECT_EQ(done, head.size() + body.size() + tail.size());
  EXPECT_EQ(p.client->counters().inline_messages - inline_before, 1u);
  Status st;
  EXPECT_EQ(read_text(*p.server, done, kWaitAll, &st), head + body + tail);
  // Small pieces around one large enough for a zero-copy write: copied, written from the caller's
  // buffer, copied; every byte in order.
  std::string a(700, 'a'), big(20000, 'b'), c(300, 'c');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>('A' + i % 26);
  iovec mixed[] = {{a.data(), a.size()}, {big.data(), big.size()}, {c.data(), c.size()}};
  const uint64_t zcopy_before = p.client->counters().zcopy_bytes;
  auto reader = std::async(std::launch::async, [&] {
    Status rst;
    return read_text(*p.server, a.size() + big.size() + c.size(), kWaitAll, &rst);
  });
  done = 0;
  ASSERT_EQ(p.client->write(mixed, 3, 0, &done), Status::kOk);
  EXPECT_EQ(done, a.size() + big.size() + c.size());
  EXPECT_EQ(reader.get(), a + big + c);
  EXPECT_EQ(p.client->counters().zcopy_bytes - zcopy_before, big.size());
}

// MSG_MORE and TCP_CORK (docs/protocol.md, "Holding a message back"): a write that says more follows
// is held, unposted, and the next one joins it; it goes with a write that does not say so, a push,
// an end, a move's marker, a wait on the stream, or before a zero-copy write, always in order.
TEST(StreamApi, AWriteThatSaysMoreFollowsIsHeldAndGoesWithTheNextInOneMessage) {
  StreamOptions o = small_options();
  o.zcopy_threshold = 16 * 1024;
  Pair p = connect_pair(7647, o);
  ASSERT_TRUE(p.client && p.server);
  Status st;
  const uint64_t inline_before = p.client->counters().inline_messages;
  ASSERT_EQ(write_text(*p.client, "HTTP/1.1 200 OK\r\n", kMore), Status::kOk);
  EXPECT_TRUE(p.client->holds_message());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(read_text(*p.server, 100, kNonBlocking, &st), "");  // nothing was posted
  EXPECT_EQ(st, Status::kWouldBlock);
  ASSERT_EQ(write_text(*p.client, "\r\nbody"), Status::kOk);
  EXPECT_FALSE(p.client->holds_message());
  EXPECT_EQ(p.client->counters().inline_messages - inline_before, 1u);  // header and body: one message
  EXPECT_EQ(read_text(*p.server, 23, kWaitAll, &st), "HTTP/1.1 200 OK\r\n\r\nbody");
  // A push (the application uncorked).
  ASSERT_EQ(write_text(*p.client, "pushed", kMore), Status::kOk);
  p.client->push();
  EXPECT_EQ(read_text(*p.server, 6, kWaitAll, &st), "pushed");
  // A wait on the stream: the request goes before the client sleeps for its answer.
  ASSERT_EQ(write_text(*p.client, "ping", kMore), Status::kOk);
  auto answer = std::async(std::launch::async, [&] {
    Status rst;
    std::string got = read_text(*p.server, 4, kWaitAll, &rst);
    return rst == Status::kOk && got == "ping" ? write_text(*p.server, "pong") : Status::kProtocolError;
  });
  EXPECT_EQ(read_text(*p.client, 4, kWaitAll, &st), "pong");
  EXPECT_EQ(answer.get(), Status::kOk);
  // A zero-copy write goes after the held bytes, each in order.
  std::string big(20000, 'z');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>('a' + i % 26);
  auto reader = std::async(std::launch::async, [&] {
    Status rst;
    return read_text(*p.server, 5 + big.size(), kWaitAll, &rst);
  });
  ASSERT_EQ(write_text(*p.client, "head:", kMore), Status::kOk);
  ASSERT_EQ(write_text(*p.client, big, kMore), Status::kOk);
  EXPECT_EQ(reader.get(), "head:" + big);
  // The end comes after the held bytes.
  ASSERT_EQ(write_text(*p.client, "last words", kMore), Status::kOk);
  ASSERT_EQ(p.client->shutdown_write(), Status::kOk);
  EXPECT_EQ(read_text(*p.server, 100, kWaitAll, &st), "last words");
  EXPECT_EQ(read_text(*p.server, 100, 0, &st), "");
  EXPECT_EQ(st, Status::kOk);
}

TEST(StreamApi, AHeldMessageGoesBeforeTheMoveMarkerAndAfterTwoTicks) {
  Pair p = connect_pair(7648);
  ASSERT_TRUE(p.client && p.server);
  Status st;
  ASSERT_EQ(write_text(*p.client, "aged", kMore), Status::kOk);
  EXPECT_TRUE(p.client->push_if_aged());   // one tick: still held
  EXPECT_FALSE(p.client->push_if_aged());  // two: it went
  EXPECT_EQ(read_text(*p.server, 4, kWaitAll, &st), "aged");
  // The client's stack answers the server's marker with its own, after its held bytes, while its
  // application blocks in a read.
  ASSERT_EQ(write_text(*p.client, "before the marker", kMore), Status::kOk);
  auto client_reads = std::async(std::launch::async, [&] {
    Status rst;
    read_text(*p.client, 100, 0, &rst);
    return rst;
  });
  std::vector<uint8_t> unread;
  bool peer_ended = true;
  ASSERT_EQ(p.server->move_to_tcp(&unread, &peer_ended), Status::kOk);
  EXPECT_EQ(std::string(unread.begin(), unread.end()), "before the marker");
  EXPECT_EQ(client_reads.get(), Status::kMovedToTcp);
}

TEST(StreamApi, ShutdownIsAnEndForThePeerWhileTheOtherDirectionGoesOn) {
  Pair p = connect_pair(7603);
  ASSERT_TRUE(p.client && p.server);
  ASSERT_EQ(write_text(*p.client, "request"), Status::kOk);
  ASSERT_EQ(p.client->shutdown_write(), Status::kOk);
  EXPECT_EQ(write_text(*p.client, "more"), Status::kShutDown);
  Status st;
  EXPECT_EQ(read_text(*p.server, 100, kWaitAll, &st), "request");
  EXPECT_EQ(read_text(*p.server, 100, 0, &st), "");  // the end, repeatably
  EXPECT_EQ(st, Status::kOk);
  EXPECT_TRUE(p.server->readiness().peer_closed);
  ASSERT_EQ(write_text(*p.server, "response"), Status::kOk);
  EXPECT_EQ(read_text(*p.client, 8, kWaitAll, &st), "response");
  EXPECT_EQ(p.server->close(), Status::kOk);
  EXPECT_EQ(read_text(*p.client, 8, 0, &st), "");
  EXPECT_EQ(st, Status::kOk);
}

TEST(StreamApi, AbortIsAResetNeverAnEnd) {
  Pair p = connect_pair(7604);
  ASSERT_TRUE(p.client && p.server);
  ASSERT_EQ(write_text(*p.client, "partial"), Status::kOk);
  p.client->abort();
  Status st = Status::kOk;
  std::string got;
  for (int i = 0; i < 100 && st == Status::kOk; ++i) {
    std::string piece = read_text(*p.server, 100, 0, &st);
    if (st == Status::kOk && piece.empty()) break;  // a clean end: wrong
    got += piece;
  }
  EXPECT_EQ(st, Status::kReset);
  EXPECT_EQ(write_text(*p.client, "x"), Status::kReset);
}

// An abort that asks again (a server whose process forked before its switch) is a reset like any
// abort, and the peer can tell it from a plain one; a plain abort never reads as one.
TEST(StreamApi, AnAbortThatAsksAgainIsAResetTheClientCanTellApart) {
  for (bool again : {true, false}) {
    Pair p = connect_pair(again ? 7640 : 7641);
    ASSERT_TRUE(p.client && p.server);
    if (again) {
      p.server->abort_asking_again();
    } else {
      p.server->abort();
    }
    Status st = Status::kOk;
    for (int i = 0; i < 100 && st == Status::kOk; ++i) {
      if (read_text(*p.client, 100, 0, &st).empty() && st == Status::kOk) break;  // a clean end: wrong
    }
    EXPECT_EQ(st, Status::kReset);
    EXPECT_TRUE(p.client->peer_aborted());
    EXPECT_EQ(p.client->peer_asked_again(), again);
  }
}

size_t open_descriptors() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

// Sleeps as poll(2) does (stream_sleeper.h: news taken, a look, a sleep) until `ready` says so, for
// at most 5 s; returns the last look.
template <typename Ready>
bool sleep_until(RdmaStream& s, Ready ready) {
  StreamSleeper sleeper;
  if (!sleeper.add(s)) return false;
  std::vector<pollfd> fds;
  for (int i = 0; i < 50; ++i) {
    sleeper.take_news();
    if (ready()) return true;
    fds.clear();
    sleeper.append_pollfds(&fds);
    ::poll(fds.data(), fds.size(), 100);
  }
  return ready();
}

TEST(StreamApi, WritesBlockOnCreditsAndReadinessReportsWritableAgain) {
  Pair p = connect_pair(7605);
  ASSERT_TRUE(p.client && p.server);
  std::vector<uint8_t> buf(1 << 20);
  fill(buf.data(), buf.size(), 5, 0);
  // Non-blocking: fills the 64 KiB ring, then would block.
  size_t taken = 0;
  for (;;) {
    iovec iov{buf.data() + taken, buf.size() - taken};
    size_t done = 0;
    Status st = p.client->write(&iov, 1, kNonBlocking, &done);
    if (st == Status::kWouldBlock) break;
    ASSERT_EQ(st, Status::kOk);
    taken += done;
  }
  EXPECT_GT(taken, 0u);
  EXPECT_LE(taken, 65536u);
  EXPECT_FALSE(p.client->readiness().writable);
  // The reader drains; the writer's sleeper wakes and it is writable again.
  std::vector<uint8_t> in(taken);
  iovec iov{in.data(), in.size()};
  size_t done = 0;
  ASSERT_EQ(p.server->read(&iov, 1, kWaitAll, &done), Status::kOk);
  EXPECT_EQ(first_difference(in.data(), done, 5, 0), done);
  EXPECT_TRUE(sleep_until(*p.client, [&] { return p.client->readiness().writable; }));
  EXPECT_GE(p.client->counters().credit_stalls, 1u);
}

TEST(StreamApi, APollerSleepsOnAnEventfdOfItsThreadAndTheLinksDescriptorsNoneOfTheStreams) {
  Pair p = connect_pair(7630);
  ASSERT_TRUE(p.client && p.server);
  // Looks, writes and reads need no descriptor (blocking calls sleep on the link).
  size_t before = open_descriptors();
  EXPECT_FALSE(p.client->readiness().readable);
  ASSERT_EQ(write_text(*p.server, "news"), Status::kOk);
  EXPECT_EQ(open_descriptors(), before);
  StreamSleeper sleeper;
  ASSERT_TRUE(sleeper.add(*p.client));
  EXPECT_EQ(open_descriptors(), before + 1);  // the sleeper's eventfd, whatever the streams
  std::vector<pollfd> fds;
  sleeper.append_pollfds(&fds);
  ASSERT_EQ(fds.size(), 3u);  // its eventfd, the link's completion channel and connection events
  // News that came before the sleeper: found by its first look.
  EXPECT_TRUE(sleep_until(*p.client, [&] { return p.client->readiness().readable; }));
  Status st = Status::kOk;
  EXPECT_EQ(read_text(*p.client, 16, kNonBlocking, &st), "news");
  // Another thread's look takes the link's event the sleeper would sleep on: the news it hands out
  // wakes the sleeper through its own list.
  sleeper.take_news();
  EXPECT_FALSE(p.client->readiness().readable);  // armed: the next change is told
  std::thread other([&] {
    ASSERT_EQ(write_text(*p.server, "more"), Status::kOk);
    for (int i = 0; i < 500 && !p.client->readiness().readable; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  });
  other.join();
  ASSERT_TRUE(p.client->readiness(false).readable);
  pollfd news{fds[0].fd, POLLIN, 0};
  EXPECT_EQ(::poll(&news, 1, 1000), 1);
  sleeper.clear();
  EXPECT_EQ(open_descriptors(), before + 1);
}

// Many channels of one link, watched as an event loop's epoll set watches them (link_watch.h): the
// watch names the channels that had news, not every channel of the link; and two watches holding the
// same channel (two epoll sets) are both told.
TEST(StreamApi, ALinkWatchNamesOnlyTheChannelsWithNewsAndEveryWatchOfAChannelIsTold) {
  constexpr size_t kChannels = 40;
  StreamOptions options = small_options();
  options.recv_queue_depth = 4;
  std::unique_ptr<StreamListener> listener = peer_util::listen_on("7632", options);
  ASSERT_TRUE(listener);
  auto connecting = std::async(std::launch::async, [&] {
    std::vector<std::unique_ptr<RdmaStream>> made;
    for (size_t i = 0; i < kChannels; ++i) made.push_back(peer_util::connect_to(self_address(), "7632", options));
    return made;
  });
  std::vector<std::unique_ptr<RdmaStream>> servers;
  for (size_t i = 0; i < kChannels; ++i) servers.push_back(peer_util::accept_one(*listener, 20));
  std::vector<std::unique_ptr<RdmaStream>> clients = connecting.get();
  for (size_t i = 0; i < kChannels; ++i) ASSERT_TRUE(clients[i] && servers[i]) << i;
  // The server accepts in its own order: pair each client with its server by the client's nonce.
  std::vector<RdmaStream*> server_of(kChannels);
  for (size_t i = 0; i < kChannels; ++i) {
    for (auto& s : servers) {
      if (s->client_nonce() == clients[i]->client_nonce()) server_of[i] = s.get();
    }
    ASSERT_NE(server_of[i], nullptr);
  }
  size_t before = open_descriptors();
  LinkWatch watch, second;
  ASSERT_EQ(watch.bind(*clients[0]), Status::kOk);
  ASSERT_EQ(second.bind(*clients[0]), Status::kOk);
  EXPECT_EQ(open_descriptors(), before + 4);  // each watch: its set and its list's eventfd, whatever the channels
  std::vector<int> tags(kChannels);
  for (size_t i = 0; i < kChannels; ++i) {
    ASSERT_TRUE(watch.watches_link_of(*clients[i])) << "channel " << i << " is on another link";
    ASSERT_TRUE(watch.subscribe(*clients[i], &tags[i]));
    EXPECT_FALSE(clients[i]->readiness(false).readable);  // looked at: news comes on the next change
  }
  constexpr size_t kNewsy = 17;
  int second_tag = 0;  // a tag is one sink's (its record's): the other set's record has its own
  ASSERT_TRUE(second.subscribe(*clients[kNewsy], &second_tag));
  std::vector<void*> news;
  watch.take(&news);
  second.take(&news);
  EXPECT_EQ(open_descriptors(), before + 4);

  ASSERT_EQ(write_text(*server_of[kNewsy], "news"), Status::kOk);
  for (LinkWatch* w : {&watch, &second}) {
    pollfd pfd{w->fd(), POLLIN, 0};
    ASSERT_EQ(::poll(&pfd, 1, 5000), 1);
    // What the link's progress or another watch's take did first makes no difference: the news
    // names channel 17 alone (a channel's news may come more than once, never another's).
    std::vector<void*> named;
    for (int round = 0; round < 50 && named.empty(); ++round) {
      ASSERT_TRUE(w->take(&named));
      if (named.empty()) ::poll(&pfd, 1, 100);
    }
    ASSERT_FALSE(named.empty()) << (w == &watch ? "the first watch" : "the second watch");
    for (void* tag : named) EXPECT_EQ(tag, w == &watch ? static_cast<void*>(&tags[kNewsy]) : &second_tag);
  }
  Status st = Status::kOk;
  EXPECT_EQ(read_text(*clients[kNewsy], 16, kNonBlocking, &st), "news");
  for (size_t i = 0; i < kChannels; ++i) {
    if (i == kNewsy) continue;
    EXPECT_FALSE(clients[i]->readiness(false).readable) << i;
  }
  // Unsubscribed, a channel's news names it no more (what its read pushed before is taken first).
  watch.take(&news);
  LinkWatch::unsubscribe(*clients[kNewsy], &tags[kNewsy]);
  ASSERT_EQ(write_text(*server_of[kNewsy], "more"), Status::kOk);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::vector<void*> named;
  watch.take(&named);
  for (void* tag : named) EXPECT_NE(tag, &tags[kNewsy]);
}

// An event loop watching an accepted link (a LinkWatch bound to its channel) takes every completion
// on it, opens included: the listener's thread is not woken by them as well (it was, at each message,
// costing a server of one thread twice the calls a request), and learns of an open by its bell, rung
// by the take that found it. Once nothing watches the link, its completions wake the listener again.
TEST(StreamApi, AListenerSleepsThroughTheCompletionsOfALinkAnEventLoopWatches) {
  Pair p = connect_pair(7634);
  ASSERT_TRUE(p.client && p.server);
  auto listener_woken = [&](int timeout_ms) {
    pollfd pfd{p.listener->fd(), POLLIN, 0};
    return ::poll(&pfd, 1, timeout_ms) == 1;
  };
  auto watch = std::make_unique<LinkWatch>();
  ASSERT_EQ(watch->bind(*p.server), Status::kOk);
  int tag = 0;
  ASSERT_TRUE(watch->subscribe(*p.server, &tag));
  std::vector<void*> news;
  std::shared_ptr<StreamLink> held;
  // As the loop's epoll_wait before it sleeps: the link's queue armed with nothing left on it, so
  // that the next completion raises an event.
  auto arm = [&] {
    for (int i = 0; i < 100; ++i) {
      watch->take(&news, /*lazy=*/true);
      bool came = watch->arm_for_sleep(&held);
      LinkWatch::end_sleep(*held);
      if (!came) return true;
    }
    return false;
  };
  auto watch_woken = [&] {
    pollfd pfd{watch->fd(), POLLIN, 0};
    return ::poll(&pfd, 1, 5000) == 1;
  };
  p.listener->collect(std::chrono::seconds(10));  // what woke it before is taken
  ASSERT_TRUE(arm());
  ASSERT_EQ(write_text(*p.client, "request"), Status::kOk);
  ASSERT_TRUE(watch_woken());
  // The completion's event is still there, untaken, for any set that watches the channel.
  EXPECT_FALSE(listener_woken(200)) << "the listener's thread woke at a message its event loop takes";
  watch->take(&news, true);
  Status st = Status::kOk;
  EXPECT_EQ(read_text(*p.server, 16, kNonBlocking, &st), "request");

  // A second connection from the client's process opens on the same link: the loop's take finds the
  // open and rings the listener's bell.
  ASSERT_TRUE(arm());
  auto second = std::async(std::launch::async, [&] { return peer_util::connect_to(self_address(), "7634", small_options()); });
  ASSERT_TRUE(watch_woken());
  watch->take(&news, true);
  EXPECT_TRUE(listener_woken(5000)) << "the listener did not hear of the open its event loop took";
  std::unique_ptr<RdmaStream> second_server = peer_util::accept_one(*p.listener, 20);
  std::unique_ptr<RdmaStream> second_client = second.get();
  ASSERT_TRUE(second_server && second_client);
  EXPECT_TRUE(watch->watches_link_of(*second_server)) << "the second connection took a link of its own";

  // Nothing watches the link any more: its next completion wakes the listener, which must see opens.
  LinkWatch::unsubscribe(*p.server, &tag);
  watch.reset();
  p.listener->collect(std::chrono::seconds(10));
  ASSERT_EQ(write_text(*p.client, "again"), Status::kOk);
  EXPECT_TRUE(listener_woken(5000)) << "an unwatched link's completion did not wake the listener";
}

// Writes `piece` bytes at a time (a message each) without blocking until nothing more fits; returns
// how many bytes were taken.
size_t fill_until_blocked(RdmaStream& s, std::vector<uint8_t>& buf, size_t piece) {
  size_t taken = 0;
  for (;;) {
    iovec iov{buf.data() + taken, std::min(piece, buf.size() - taken)};
    size_t done = 0;
    if (s.write(&iov, 1, kNonBlocking, &done) != Status::kOk) return taken;
    taken += done;
  }
}

// Reads `s` into `buf` until its end or a failure: the bytes read in *got, how it ended returned.
Status read_to_end(RdmaStream& s, std::vector<uint8_t>& buf, size_t* got) {
  *got = 0;
  for (;;) {
    iovec iov{buf.data() + *got, buf.size() - *got};
    size_t done = 0;
    Status st = s.read(&iov, 1, 0, &done);
    if (st != Status::kOk || done == 0) return st;
    *got += done;
  }
}

TEST(StreamApi, ShutdownAndCloseReturnInTimeWhenThePeerMakesNoCall) {
  Pair p = connect_pair(7614);
  ASSERT_TRUE(p.client && p.server);
  // The server makes no call at all: it neither reads nor reposts its receives, so neither ring
  // space nor a receive credit comes back (a peer stopped, or busy elsewhere). The client spends what
  // it has, one message per byte, then ends its side and closes with a deadline.
  std::vector<uint8_t> out(1 << 20), in(1 << 20);
  fill(out.data(), out.size(), 9, 0);
  size_t taken = fill_until_blocked(*p.client, out, 1);
  ASSERT_GT(taken, 0u);
  using Clock = std::chrono::steady_clock;
  auto started = Clock::now();
  // The end is queued (as the kernel queues a FIN behind a full window), never waited for.
  EXPECT_EQ(p.client->shutdown_write(), Status::kOk);
  EXPECT_LT(Clock::now() - started, std::chrono::milliseconds(500));
  started = Clock::now();
  p.client->close(Deadline::in(std::chrono::milliseconds(300)));
  EXPECT_LT(Clock::now() - started, std::chrono::seconds(2));
  // Every byte written arrives, nothing else; then the end if it got out in time, else a reset.
  size_t got = 0;
  Status st = read_to_end(*p.server, in, &got);
  EXPECT_TRUE(st == Status::kOk || st == Status::kReset) << to_string(st);
  EXPECT_EQ(got, taken);
  EXPECT_EQ(first_difference(in.data(), got, 9, 0), got);
}

// The client's side shut down with its end waiting for a receive of the server's, none of which
// comes back while the server makes no call: the server fills the client's ring and arms (a
// non-blocking write: no thread of its waits); the client spends its data credits on small writes
// (the pattern's `seed`) and arms too; its read of the server's bytes frees room, for which it wakes
// the server with its last credit. Returns what the client wrote (0 when the case could not be made).
size_t shut_down_with_no_receive(Pair& p, uint8_t seed) {
  std::vector<uint8_t> big(1 << 20);
  fill(big.data(), big.size(), 3, 0);
  size_t served = fill_until_blocked(*p.server, big, big.size());
  std::vector<uint8_t> small(1 << 16);
  fill(small.data(), small.size(), seed, 0);
  size_t written = fill_until_blocked(*p.client, small, 1);
  std::vector<uint8_t> in(served);
  iovec iov{in.data(), in.size()};
  size_t got = 0;
  if (served == 0 || written == 0 || p.client->read(&iov, 1, kWaitAll, &got) != Status::kOk) return 0;
  EXPECT_EQ(first_difference(in.data(), got, 3, 0), served);
  if (p.client->shutdown_write() != Status::kOk) return 0;
  EXPECT_EQ(p.client->counters().end_waiting, 1u) << "the close found a receive: the case is not made";
  return p.client->counters().end_waiting == 1 ? written : 0;
}

TEST(StreamApi, ACloseWithoutAReceiveOfThePeersReachesAPeerThatMakesNoCallAsAnEnd) {
  Pair p = connect_pair(7649);
  ASSERT_TRUE(p.client && p.server);
  size_t written = shut_down_with_no_receive(p, 4);
  ASSERT_GT(written, 0u);
  // The close goes with the release on the receive the server keeps for it: no deadline passes.
  EXPECT_EQ(p.client->close(Deadline::in(std::chrono::milliseconds(2000))), Status::kOk);
  // The server then reads every byte and a clean end, as from kernel TCP's FIN.
  std::vector<uint8_t> back(written + 1);
  size_t taken = 0;
  Status st = read_to_end(*p.server, back, &taken);
  EXPECT_EQ(st, Status::kOk) << to_string(st);
  EXPECT_EQ(taken, written);
  EXPECT_EQ(first_difference(back.data(), taken, 4, 0), taken);
}

// A close still owed for want of a receive of the peer's when the peer's release comes: the client
// shuts its side down with none left (as in the test above), then blocks in a read; the server
// closes. The client's blocked read takes the server's end and release straight off the link,
// before it reads the server's credit update, and answers the release at once: its close must go
// with that answer. A release alone there, before the client's close, is what the server reads as
// "a release before its end", a protocol violation where both sides ended in order.
TEST(StreamApi, AnOwedCloseGoesWithTheAnswerToThePeersRelease) {
  Pair p = connect_pair(7650);
  ASSERT_TRUE(p.client && p.server);
  size_t written = shut_down_with_no_receive(p, 6);
  ASSERT_GT(written, 0u);
  std::vector<uint8_t> rest(64);
  size_t taken = 0;
  auto reader = std::async(std::launch::async, [&] { return read_to_end(*p.client, rest, &taken); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the client's read sleeps on the link
  // The server reads the client's bytes and ends (no end of the client's has come: a close, not a
  // read to the end).
  std::vector<uint8_t> back(written);
  iovec back_iov{back.data(), back.size()};
  size_t read = 0;
  ASSERT_EQ(p.server->read(&back_iov, 1, kWaitAll, &read), Status::kOk);
  EXPECT_EQ(first_difference(back.data(), read, 6, 0), written);
  EXPECT_EQ(p.server->close(Deadline::in(std::chrono::milliseconds(2000))), Status::kOk);
  ASSERT_EQ(reader.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  Status st = reader.get();
  EXPECT_EQ(st, Status::kOk) << to_string(st);
  EXPECT_EQ(taken, 0u);
  // The server takes the answer: the client's end, in order.
  Readiness r;
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  do {
    r = p.server->readiness(false);
    if (r.peer_closed || r.failed) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  } while (std::chrono::steady_clock::now() < until);
  EXPECT_FALSE(r.failed) << "the server read the client's answer as a violation";
  EXPECT_TRUE(r.peer_closed);
}

// A client connecting from another thread with `pairing` (a stream, or why not), and the wait until
// `listener` holds its request.
// What a connect gave: its status, the stream, and the server's word when it declined.
struct Connected {
  Status first;
  std::unique_ptr<RdmaStream> second;
  DeclineReason declined;
};
std::future<Connected> connect_in_background(const char* port, const Pairing& pairing, const StreamOptions& o) {
  return std::async(std::launch::async, [port, pairing, o] {
    sockaddr_in addr = peer_util::ipv4(self_address(), port);
    std::unique_ptr<RdmaStream> s;
    DeclineReason declined = DeclineReason::kServerStaysTcp;  // connect must overwrite it
    Status st = RdmaStream::connect(reinterpret_cast<sockaddr*>(&addr), pairing, o, &s, &declined);
    return Connected{st, std::move(s), declined};
  });
}

void wait_until_held(StreamListener& listener) {
  while (listener.held() == 0) {
    listener.collect(std::chrono::seconds(10));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

TEST(StreamApi, TheListenerHoldsARequestUntilItsTcpConnectionIsAccepted) {
  StreamOptions o = small_options();
  std::unique_ptr<StreamListener> listener = peer_util::listen_on("7606", o);
  ASSERT_TRUE(listener);
  Pairing wanted = pairing_for(40001, 7606);
  auto client = connect_in_background("7606", wanted, o);
  wait_until_held(*listener);
  std::unique_ptr<RdmaStream> server;
  Pairing other = pairing_for(40002, 7606);
  EXPECT_EQ(listener->accept(other.tuple, 1, &server), Status::kWouldBlock);  // not that connection
  std::this_thread::sleep_for(std::chrono::milliseconds(500));                // "the TCP accept is late"
  ASSERT_EQ(listener->accept(wanted.tuple, 0xabcdef, &server), Status::kOk);
  auto [status, stream, declined] = client.get();
  EXPECT_EQ(declined, DeclineReason::kNone);
  ASSERT_EQ(status, Status::kOk);
  EXPECT_EQ(stream->server_nonce(), 0xabcdefu);
  EXPECT_EQ(server->client_nonce(), wanted.client_nonce);
  EXPECT_EQ(std::memcmp(&server->tuple(), &wanted.tuple, sizeof wanted.tuple), 0);
}

// A request held past its client's wait (a forking server whose child takes the upgrade up late):
// the client has given up and left, and taking the request up says so (a reset), not that the
// server lacks resources, which the failing queue-pair steps alone would suggest.
TEST(StreamApi, ARequestWhoseClientGaveUpIsAResetNotALackOfResources) {
  StreamOptions o = small_options();
  std::unique_ptr<StreamListener> listener = peer_util::listen_on("7649", o);
  ASSERT_TRUE(listener);
  StreamOptions quick = o;
  quick.timeout_ms = 500;
  Pairing late = pairing_for(40009, 7649);
  auto client = connect_in_background("7649", late, quick);
  wait_until_held(*listener);
  EXPECT_EQ(client.get().first, Status::kTimeout);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the client's rejection arrives
  std::unique_ptr<RdmaStream> server;
  Status st = listener->accept(late.tuple, 1, &server);
  EXPECT_EQ(st, Status::kReset) << to_string(st);
  EXPECT_EQ(server, nullptr);
}

// A pre-fork server's directory: the listener on the well-known port sends a request on to the
// listener (on a port of its own) of the process that accepted that TCP connection; the client
// follows the redirect once and the stream works. A request nobody maps stays held.
TEST(StreamApi, ARedirectSendsTheClientToAnotherListener) {
  StreamOptions o = small_options();
  std::unique_ptr<StreamListener> directory = peer_util::listen_on("7609", o);
  std::unique_ptr<StreamListener> worker = peer_util::listen_on("0", o);
  ASSERT_TRUE(directory && worker);
  ASSERT_NE(worker->port(), 0);
  EXPECT_EQ(directory->port(), 7609);
  Pairing wanted = pairing_for(40004, 7609);
  auto client = connect_in_background("7609", wanted, o);
  wait_until_held(*directory);
  auto nowhere = [](const TcpTuple&) -> uint16_t { return 0; };
  EXPECT_TRUE(directory->redirect(nowhere).empty());
  EXPECT_EQ(directory->held(), 1u);
  auto to_worker = [&](const TcpTuple& t) -> uint16_t {
    return std::memcmp(&t, &wanted.tuple, sizeof t) == 0 ? worker->port() : 0;
  };
  auto sent = directory->redirect(to_worker);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].port, worker->port());
  EXPECT_EQ(directory->held(), 0u);
  std::unique_ptr<RdmaStream> server;
  Status accepted = Status::kWouldBlock;
  for (int i = 0; i < 250 && accepted == Status::kWouldBlock; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    worker->collect(std::chrono::seconds(10));
    accepted = worker->accept(wanted.tuple, 0x5eed, &server);
  }
  ASSERT_EQ(accepted, Status::kOk);
  auto [status, stream, declined] = client.get();
  EXPECT_EQ(declined, DeclineReason::kNone);
  ASSERT_EQ(status, Status::kOk);
  EXPECT_EQ(stream->server_nonce(), 0x5eedu);
  EXPECT_EQ(directory->counters().redirected, 1u);
  ASSERT_EQ(write_text(*stream, "through the redirect"), Status::kOk);
  Status st;
  EXPECT_EQ(read_text(*server, 64, 0, &st), "through the redirect");
}

TEST(StreamApi, AnUnclaimedRequestIsRejectedAfterTheHoldTime) {
  StreamOptions o = small_options();
  std::unique_ptr<StreamListener> listener = peer_util::listen_on("7607", o);
  ASSERT_TRUE(listener);
  Pairing nobody = pairing_for(40003, 7607);
  auto client = connect_in_background("7607", nobody, o);
  auto start = std::chrono::steady_clock::now();
  while (client.wait_for(std::chrono::milliseconds(20)) != std::future_status::ready &&
         std::chrono::steady_clock::now() - start < std::chrono::seconds(10)) {
    listener->collect(std::chrono::milliseconds(300));
  }
  Connected expired = client.get();
  EXPECT_EQ(expired.first, Status::kRejected);
  EXPECT_EQ(expired.declined, DeclineReason::kExpired);  // the server said why
  EXPECT_EQ(listener->counters().rejected_expired, 1u);
  EXPECT_EQ(listener->held(), 0u);
}

// A server that will not upgrade a connection declines its request: held, or arriving later, it is
// rejected at once (the client does not wait out the hold), and another connection's is not.
TEST(StreamApi, ADeclinedRequestIsRejectedAtOnceHeldOrStillToCome) {
  StreamOptions o = small_options();
  o.timeout_ms = 20000;  // a client left to wait would wait this long
  std::unique_ptr<StreamListener> listener = peer_util::listen_on("7620", o);
  ASSERT_TRUE(listener);
  Pairing held = pairing_for(40005, 7620), later = pairing_for(40006, 7620);
  auto first = connect_in_background("7620", held, o);
  wait_until_held(*listener);
  auto start = std::chrono::steady_clock::now();
  listener->decline(held.tuple, DeclineReason::kBusy);
  Connected declined_held = first.get();
  EXPECT_EQ(declined_held.first, Status::kRejected);
  EXPECT_EQ(declined_held.declined, DeclineReason::kBusy);
  listener->decline(later.tuple);  // before its request comes
  auto second = connect_in_background("7620", later, o);
  while (second.wait_for(std::chrono::milliseconds(20)) != std::future_status::ready) {
    listener->collect(std::chrono::seconds(30));
  }
  Connected declined_later = second.get();
  EXPECT_EQ(declined_later.first, Status::kRejected);
  EXPECT_EQ(declined_later.declined, DeclineReason::kServerStaysTcp);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(listener->counters().rejected_declined, 2u);
  EXPECT_EQ(listener->counters().rejected_expired, 0u);
}

// The binding proof's first step (docs/architecture.md, "Security model"): a request whose tuple names
// another client address than the one it comes from is rejected at once; two requests for one
// connection are both rejected, and a third too: the connection stays TCP.
TEST(StreamApi, AForgedOrDuplicateTupleIsRejected) {
  StreamOptions o = small_options();
  std::unique_ptr<StreamListener> listener = peer_util::listen_on("7621", o);
  ASSERT_TRUE(listener);
  Pairing forged = pairing_for(40007, 7621);
  inet_pton(AF_INET, "10.9.9.9", forged.tuple.client_addr);
  auto first = connect_in_background("7621", forged, o);
  while (first.wait_for(std::chrono::milliseconds(20)) != std::future_status::ready) listener->collect(std::chrono::seconds(30));
  Connected forged_result = first.get();
  EXPECT_EQ(forged_result.first, Status::kRejected);
  EXPECT_EQ(forged_result.declined, DeclineReason::kNone);  // a forger is told nothing
  EXPECT_EQ(listener->counters().rejected_forged, 1u);
  EXPECT_EQ(listener->held(), 0u);

  Pairing twice = pairing_for(40008, 7621);
  auto a = connect_in_background("7621", twice, o);
  wait_until_held(*listener);
  auto b = connect_in_background("7621", twice, o);
  while (b.wait_for(std::chrono::milliseconds(20)) != std::future_status::ready) listener->collect(std::chrono::seconds(30));
  Connected first_of_two = a.get(), second_of_two = b.get();
  EXPECT_EQ(first_of_two.first, Status::kRejected);
  EXPECT_EQ(second_of_two.first, Status::kRejected);
  EXPECT_EQ(first_of_two.declined, DeclineReason::kDuplicate);
  EXPECT_EQ(second_of_two.declined, DeclineReason::kDuplicate);
  EXPECT_EQ(listener->counters().rejected_duplicate, 2u);
  auto c = connect_in_background("7621", twice, o);  // a third, later: still not served
  while (c.wait_for(std::chrono::milliseconds(20)) != std::future_status::ready) listener->collect(std::chrono::seconds(30));
  EXPECT_EQ(c.get().first, Status::kRejected);
  std::unique_ptr<RdmaStream> server;
  EXPECT_EQ(listener->accept(twice.tuple, 1, &server), Status::kWouldBlock);
}

// A client that sends its request and never completes the handshake (librdmacm sends its last message
// only when the client reads the connect response): the accept that answered it waits for it alone,
// and another connection's accept goes on meanwhile (begin_accept, then await_established outside
// the caller's listener lock, as the preload layer does).
TEST(StreamApi, AClientThatNeverCompletesStallsNoOtherAccept) {
  StreamOptions o = small_options();
  std::unique_ptr<StreamListener> listener = peer_util::listen_on("7622", o);
  ASSERT_TRUE(listener);
  Pairing silent = pairing_for(40009, 7622), legit = pairing_for(40010, 7622);
  // The silent client, by hand.
  sockaddr_in addr = peer_util::ipv4(self_address(), "7622");
  rdma_event_channel* ch = rdma_create_event_channel();
  rdma_cm_id* id = nullptr;
  ASSERT_EQ(rdma_create_id(ch, &id, nullptr, RDMA_PS_TCP), 0);
  auto next = [&](rdma_cm_event_type want) {
    rdma_cm_event* ev = nullptr;
    if (rdma_get_cm_event(ch, &ev) != 0) return false;
    bool ok = ev->event == want;
    rdma_ack_cm_event(ev);
    return ok;
  };
  ASSERT_EQ(rdma_resolve_addr(id, nullptr, reinterpret_cast<sockaddr*>(&addr), 2000), 0);
  ASSERT_TRUE(next(RDMA_CM_EVENT_ADDR_RESOLVED));
  ASSERT_EQ(rdma_resolve_route(id, 2000), 0);
  ASSERT_TRUE(next(RDMA_CM_EVENT_ROUTE_RESOLVED));
  ibv_cq* cq = ibv_create_cq(id->verbs, 16, nullptr, nullptr, 0);
  ibv_qp_init_attr attr{};
  attr.send_cq = attr.recv_cq = cq;
  attr.qp_type = IBV_QPT_RC;
  attr.cap.max_send_wr = attr.cap.max_recv_wr = 8;
  attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
  ASSERT_EQ(rdma_create_qp(id, nullptr, &attr), 0);
  ConnectRequest request{};
  request.magic = kSetupMagic;
  request.version = kProtocolVersion;
  request.ring_size_log2 = 16;
  request.queue_depth = 8;
  request.tuple = silent.tuple;
  request.client_nonce = silent.client_nonce;
  rdma_conn_param param{};
  param.private_data = &request;
  param.private_data_len = sizeof request;
  param.retry_count = 6;
  ASSERT_EQ(rdma_connect(id, &param), 0);  // and never a look at the channel again
  wait_until_held(*listener);
  std::unique_ptr<RdmaStream> stalled;
  ASSERT_EQ(listener->begin_accept(silent.tuple, 1, o, &stalled), Status::kOk);

  auto client = connect_in_background("7622", legit, o);
  wait_until_held(*listener);
  auto start = std::chrono::steady_clock::now();
  std::unique_ptr<RdmaStream> server;
  ASSERT_EQ(listener->begin_accept(legit.tuple, 2, o, &server), Status::kOk);
  ASSERT_EQ(server->await_established(), Status::kOk);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  EXPECT_EQ(client.get().first, Status::kOk);
  EXPECT_NE(stalled->await_established(), Status::kOk);  // its own wait ends (timeout, or the CM gives up)
  stalled.reset();
  rdma_destroy_qp(id);
  ibv_destroy_cq(cq);
  rdma_destroy_id(id);
  rdma_destroy_event_channel(ch);
}

// Reads to the end of the stream in pieces of `piece`: true when exactly `bytes` came, each the
// sequence `seed` wrote.
bool read_to_end_checked(RdmaStream& s, uint64_t seed, uint64_t bytes, size_t piece) {
  std::vector<uint8_t> buf(piece);
  uint64_t pos = 0;
  for (;;) {
    iovec iov{buf.data(), buf.size()};
    size_t done = 0;
    if (s.read(&iov, 1, 0, &done) != Status::kOk) return false;
    if (done == 0) return pos == bytes;
    if (first_difference(buf.data(), done, seed, pos) != done) return false;
    pos += done;
  }
}

TEST(StreamApi, ConcurrentReaderAndWriterThreadsOnBothEnds) {
  Pair p = connect_pair(7608);
  ASSERT_TRUE(p.client && p.server);
  constexpr uint64_t kBytes = 3 << 20;
  auto pump = [](RdmaStream* s, uint64_t seed) {
    std::vector<uint8_t> buf(100000);
    for (uint64_t pos = 0; pos < kBytes;) {
      size_t n = std::min<uint64_t>(kBytes - pos, 1 + (pos * 31) % buf.size());
      fill(buf.data(), n, seed, pos);
      iovec iov{buf.data(), n};
      size_t done = 0;
      if (s->write(&iov, 1, 0, &done) != Status::kOk) return false;
      pos += done;
    }
    return s->shutdown_write() == Status::kOk;
  };
  auto drain = [](RdmaStream* s, uint64_t seed) { return read_to_end_checked(*s, seed, kBytes, 77777); };
  auto a = std::async(std::launch::async, pump, p.client.get(), 1);
  auto b = std::async(std::launch::async, pump, p.server.get(), 2);
  auto c = std::async(std::launch::async, drain, p.server.get(), 1);
  auto d = std::async(std::launch::async, drain, p.client.get(), 2);
  EXPECT_TRUE(a.get());
  EXPECT_TRUE(b.get());
  EXPECT_TRUE(c.get());
  EXPECT_TRUE(d.get());
}


// Two writers blocked on each other's full rings (neither application reads yet): once both sleep, the
// link is quiet. An arm's own receive, reposted, is no news: answering it with a wakeup made a blocked
// writer arm again at once, and the two woke each other for ever (flow_control.cpp, may_send_wakeup).
// When they read again, every byte arrives.
TEST(StreamApi, TwoWritersBlockedOnEachOthersRingsLeaveTheLinkQuiet) {
  Pair p = connect_pair(7609);
  ASSERT_TRUE(p.client && p.server);
  constexpr uint64_t kBytes = 1 << 20;  // 16 of the 64 KiB rings
  auto pump = [](RdmaStream* s, uint64_t seed) {
    std::vector<uint8_t> buf(kBytes);
    fill(buf.data(), buf.size(), seed, 0);
    iovec iov{buf.data(), buf.size()};
    size_t done = 0;
    return s->write(&iov, 1, 0, &done) == Status::kOk && done == kBytes && s->shutdown_write() == Status::kOk;
  };
  auto a = std::async(std::launch::async, pump, p.client.get(), 3);
  auto b = std::async(std::launch::async, pump, p.server.get(), 4);
  auto messages = [&] {
    StreamCounters c = p.client->counters(), s = p.server->counters();
    return c.wakeups_received + s.wakeups_received + c.mailbox_updates_sent + s.mailbox_updates_sent;
  };
  // Both fill the other's ring (which may grow first) and sleep: a half second with at most 2 messages
  // once each has sent a ring's worth, waited for up to 15 s (a sanitized build in an emulated guest is slow to get
  // there; under ThreadSanitizer on a busy host, filling the buffers alone took longer than a window).
  // Writers that wake each other for ever never get there, and the window below fails them.
  auto both_sent = [&] {
    return p.client->counters().bytes_sent >= 65536 && p.server->counters().bytes_sent >= 65536;
  };
  uint64_t before = messages();
  for (int i = 0; i < 30; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    uint64_t now = messages();
    if (now - before <= 2 && both_sent()) break;
    before = now;
  }
  before = messages();
  std::this_thread::sleep_for(std::chrono::seconds(1));
  EXPECT_LE(messages() - before, 4u) << "blocked writers kept exchanging wakeups and updates";
  auto drain = [](RdmaStream* s, uint64_t seed) { return read_to_end_checked(*s, seed, kBytes, 65536); };
  auto c = std::async(std::launch::async, drain, p.server.get(), 3);
  auto d = std::async(std::launch::async, drain, p.client.get(), 4);
  EXPECT_TRUE(a.get());
  EXPECT_TRUE(b.get());
  EXPECT_TRUE(c.get());
  EXPECT_TRUE(d.get());
}

// Back to TCP (docs/protocol.md): the side that moves takes every byte the peer sent before its marker;
// the peer reads everything sent before ours, then learns that the rest is on TCP; neither writes on
// the stream after its marker.
TEST(StreamApi, MoveToTcpTakesThePeersUnreadBytesAndBothSidesStopAtTheMarkers) {
  Pair p = connect_pair(7610);
  ASSERT_TRUE(p.client && p.server);
  ASSERT_EQ(write_text(*p.client, "from the client"), Status::kOk);
  ASSERT_EQ(write_text(*p.server, "from the server"), Status::kOk);
  // The client's stack answers while its application blocks in a read.
  auto client_reads = std::async(std::launch::async, [&] {
    Status first, second;
    std::string got = read_text(*p.client, 100, kWaitAll, &first);
    read_text(*p.client, 100, 0, &second);
    return std::make_tuple(got, first, second);
  });
  std::vector<uint8_t> unread;
  bool peer_ended = true;
  ASSERT_EQ(p.server->move_to_tcp(&unread, &peer_ended), Status::kOk);
  EXPECT_EQ(std::string(unread.begin(), unread.end()), "from the client");
  EXPECT_FALSE(peer_ended);
  EXPECT_TRUE(p.server->moved());
  auto [got, first, second] = client_reads.get();
  EXPECT_EQ(got, "from the server");  // MSG_WAITALL returns what came before the marker
  EXPECT_EQ(first, Status::kOk);
  EXPECT_EQ(second, Status::kMovedToTcp);
  EXPECT_TRUE(p.client->moved());
  EXPECT_TRUE(p.client->readiness().moved);
  EXPECT_EQ(write_text(*p.client, "x"), Status::kMovedToTcp);
  EXPECT_EQ(write_text(*p.server, "x"), Status::kMovedToTcp);
  // Closing a moved stream sends nothing more and fails nothing at the peer.
  EXPECT_EQ(p.server->close(), Status::kOk);
  EXPECT_EQ(p.client->close(), Status::kOk);
}

TEST(StreamApi, AWriterBlockedOnCreditsStopsAtItsMarkerAndNoByteIsLost) {
  Pair p = connect_pair(7611);
  ASSERT_TRUE(p.client && p.server);
  constexpr size_t kBytes = 1 << 20;  // far more than the 64 KiB ring
  auto writer = std::async(std::launch::async, [&] {
    std::vector<uint8_t> buf(kBytes);
    fill(buf.data(), buf.size(), 7, 0);
    iovec iov{buf.data(), buf.size()};
    size_t done = 0;
    Status st = p.client->write(&iov, 1, 0, &done);
    return std::make_pair(st, done);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the writer fills the ring and waits
  std::vector<uint8_t> unread;
  bool peer_ended = true;
  ASSERT_EQ(p.server->move_to_tcp(&unread, &peer_ended), Status::kOk);
  auto [st, done] = writer.get();
  EXPECT_EQ(st, Status::kOk);
  EXPECT_GT(done, 0u);
  EXPECT_LT(done, kBytes);  // the rest is the caller's to send on TCP
  EXPECT_EQ(unread.size(), done);
  EXPECT_EQ(first_difference(unread.data(), unread.size(), 7, 0), unread.size());
  EXPECT_TRUE(p.client->writes_moved());
}

TEST(StreamApi, AMoveAfterThePeersEndSaysSo) {
  Pair p = connect_pair(7612);
  ASSERT_TRUE(p.client && p.server);
  ASSERT_EQ(write_text(*p.client, "last words"), Status::kOk);
  ASSERT_EQ(p.client->shutdown_write(), Status::kOk);
  auto client_reads = std::async(std::launch::async, [&] {
    Status st;
    read_text(*p.client, 100, 0, &st);
    return st;
  });
  std::vector<uint8_t> unread;
  bool peer_ended = false;
  ASSERT_EQ(p.server->move_to_tcp(&unread, &peer_ended), Status::kOk);
  EXPECT_EQ(std::string(unread.begin(), unread.end()), "last words");
  EXPECT_TRUE(peer_ended);
  EXPECT_EQ(client_reads.get(), Status::kMovedToTcp);
  EXPECT_TRUE(p.client->write_was_shut());
}

// Another stream to `listener` (port `port`), opened as a channel on the link the first one made.
Pair channel_on_link(StreamListener& listener, uint16_t port, uint16_t client_port) {
  Pair p;
  std::string port_text = std::to_string(port);
  auto client = connect_in_background(port_text.c_str(), pairing_for(client_port, port), small_options());
  p.server = peer_util::accept_one(listener, 20);
  p.client = client.get().second;
  return p;
}

// One byte each way on a pair: both ends still carry their stream.
bool still_carries(Pair& p, const std::string& text) {
  Status st;
  return write_text(*p.client, text) == Status::kOk && read_text(*p.server, text.size(), kWaitAll, &st) == text &&
         write_text(*p.server, text) == Status::kOk && read_text(*p.client, text.size(), kWaitAll, &st) == text;
}

// A client closes a channel (its end, then its release) and the server aborts it after both came:
// the abort finds the release, answers it with ours, and then must send nothing, or the client,
// which freed the channel's index on our release, gets a message for a channel it no longer has: a
// protocol violation that took the link and every other channel on it (a switch test's streams on
// the link failed one after another). Five rounds, each after the one before.
TEST(StreamApi, AnAbortAfterThePeersReleaseLeavesTheLinkToItsOtherChannels) {
  Pair first = connect_pair(7645);
  ASSERT_TRUE(first.client && first.server);
  for (uint16_t round = 0; round < 5; ++round) {
    Pair ended = channel_on_link(*first.listener, 7645, static_cast<uint16_t>(41000 + round));
    ASSERT_TRUE(ended.client && ended.server);
    ASSERT_TRUE(ended.client->opened_on_link());
    ASSERT_TRUE(still_carries(ended, "x"));
    ASSERT_EQ(ended.client->close(), Status::kOk);
    ended.client.reset();  // its index waits on the link for our release, and is free once it comes
    // The client's end and release are in the server's queue before it aborts.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    ended.server->abort();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ASSERT_TRUE(still_carries(first, "y")) << "round " << round << ": " << first.client->failure_detail();
  }
  Pair later = channel_on_link(*first.listener, 7645, 41100);
  ASSERT_TRUE(later.client && later.server);
  EXPECT_TRUE(later.client->opened_on_link());
  EXPECT_TRUE(still_carries(later, "z"));
}

}  // namespace
}  // namespace tcp2rdma::transport
