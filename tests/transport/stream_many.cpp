// stream_many: N streams at once between two processes, each carrying BYTES checked bytes in both
// directions, all driven by one thread without blocking: non-blocking read/write, readiness(), and
// epoll on one LinkWatch per link, looking at the streams each names. Run in the Soft-RoCE VM.
//   stream_many server PORT N BYTES
//   stream_many client ADDR PORT N BYTES
// Environment: MANY_RING_LOG2 is the ring each side asks for (default 16: 64 KiB); what each got (a
// memory lock limit may make it smaller, transport/pin_budget.h) is printed at the end. MANY_DEPTH is
// each stream's receive queue depth (default 16), which decides how many share a link's receives;
// MANY_LINK_CHANNELS, the channels of that depth a link is sized for (default 96);
// MANY_MIN_ON_LINKS, if set, the fewest streams that must have opened on a live link;
// MANY_MAX_DEVICE_KB, if set, the most memory the device may map into the process (the links' queues,
// read from /proc/self/smaps while every stream is open); MANY_MAX_LOOKS_PER_STREAM, if set, the most
// looks at streams a stream may cost on average (a wait that looked at every stream of a link on every
// event costs as many as there were waits).
// Each stream's bytes are seeded by its client nonce (client to server) and nonce + 1 (back), so the
// server needs no other way to tell the streams apart.
#include <sys/epoll.h>

#include <cctype>
#include <cerrno>
#include <cstring>

#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "link_watch.h"
#include "peer_util.h"

using namespace peer_util;
using tcp2rdma::transport::kNonBlocking;
using tcp2rdma::transport::LinkWatch;
using tcp2rdma::transport::Readiness;

namespace {

struct Peer {
  std::unique_ptr<RdmaStream> stream;
  uint64_t send_seed = 0, receive_seed = 0;
  uint64_t sent = 0, received = 0;
  bool shut = false, ended = false;
};

// One pass over a stream: write what fits, read what is there. Returns false on any failure.
bool step(Peer& p, uint64_t bytes, std::vector<uint8_t>& buf, bool* progressed) {
  Readiness r = p.stream->readiness();
  if (r.failed) {
    std::fprintf(stderr, "a stream failed after %llu/%llu bytes\n", ull(p.sent), ull(p.received));
    return false;
  }
  if (r.writable && p.sent < bytes) {
    size_t n = std::min<uint64_t>(bytes - p.sent, 1 + (p.sent * 7919) % 70000);
    fill(buf.data(), n, p.send_seed, p.sent);
    iovec iov{buf.data(), n};
    size_t done = 0;
    Status st = p.stream->write(&iov, 1, kNonBlocking, &done);
    if (st != Status::kOk && st != Status::kWouldBlock) return false;
    p.sent += done;
    *progressed |= done > 0;
  }
  if (p.sent == bytes && !p.shut) {
    if (p.stream->shutdown_write() != Status::kOk) return false;
    p.shut = *progressed = true;
  }
  if (r.readable && !p.ended) {
    iovec iov{buf.data(), buf.size()};
    size_t done = 0;
    Status st = p.stream->read(&iov, 1, kNonBlocking, &done);
    if (st == Status::kWouldBlock) return true;
    if (st != Status::kOk) return false;
    if (done == 0) {
      p.ended = *progressed = true;
      if (p.received != bytes) std::fprintf(stderr, "end after %llu bytes\n", ull(p.received));
      return p.received == bytes;
    }
    if (first_difference(buf.data(), done, p.receive_seed, p.received) != done) {
      std::fprintf(stderr, "a byte differs near %llu\n", ull(p.received));
      return false;
    }
    p.received += done;
    *progressed = true;
  }
  return true;
}

// Resident kilobytes of the process's mappings of RDMA device files: the queues (send, receive,
// completion) that rxe, like most providers, keeps in memory shared with the process.
uint64_t device_memory_kb() {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool device = false;
  uint64_t kb = 0;
  while (std::getline(smaps, line)) {
    if (!line.empty() && std::isxdigit(static_cast<unsigned char>(line[0])) && line.find('-') != std::string::npos &&
        line.find(' ') > line.find('-')) {
      device = line.find("/dev/infiniband/") != std::string::npos;
    } else if (device && line.rfind("Rss:", 0) == 0) {
      kb += std::strtoull(line.c_str() + 4, nullptr, 10);
    }
  }
  return kb;
}

int drive(std::vector<Peer>& peers, uint64_t bytes, const char* who) {
  // As the preload's epoll translation watches an event loop's connections: one LinkWatch per link
  // (link_watch.h) in an epoll set, itself nested in another set as an application may nest them;
  // a stream is looked at when its watch names it (its news), and again while a look moves bytes.
  int outer = epoll_create1(EPOLL_CLOEXEC);
  int ep = epoll_create1(EPOLL_CLOEXEC);
  epoll_event nest{};
  nest.events = EPOLLIN;
  if (epoll_ctl(outer, EPOLL_CTL_ADD, ep, &nest) != 0) return 1;
  std::vector<std::unique_ptr<LinkWatch>> watches;
  for (size_t i = 0; i < peers.size(); ++i) {
    LinkWatch* watch = nullptr;
    for (auto& w : watches) {
      if (w->watches_link_of(*peers[i].stream)) watch = w.get();
    }
    if (watch == nullptr) {
      watches.push_back(std::make_unique<LinkWatch>());
      watch = watches.back().get();
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.ptr = watch;
      if (watch->bind(*peers[i].stream) != Status::kOk || epoll_ctl(ep, EPOLL_CTL_ADD, watch->fd(), &ev) != 0) {
        std::fprintf(stderr, "%s: stream %zu of %zu cannot be watched: %s\n", who, i + 1, peers.size(),
                     std::strerror(errno));
        return 1;
      }
    }
    if (!watch->subscribe(*peers[i].stream, &peers[i])) return 1;
  }
  std::vector<uint8_t> buf(1 << 17);
  size_t finished = 0;
  uint64_t sleeps = 0, looks = 0;
  std::vector<Peer*> due;  // to look at now: every stream at first, then those with news
  for (Peer& p : peers) due.push_back(&p);
  std::vector<void*> named;
  while (finished < peers.size()) {
    std::vector<Peer*> again;
    for (Peer* p : due) {
      bool progressed = false;
      bool was_done = p->ended && p->shut;
      ++looks;
      if (!step(*p, bytes, buf, &progressed)) return 1;
      if (!was_done && p->ended && p->shut) ++finished;
      if (progressed && !(p->ended && p->shut)) again.push_back(p);
    }
    due.swap(again);
    if (!due.empty() || finished == peers.size()) continue;
    epoll_event evs[64];
    int n = epoll_wait(ep, evs, 64, 10000);
    if (n == 0) {
      std::fprintf(stderr, "%s: nothing happened for 10 s\n", who);
      return 1;
    }
    ++sleeps;
    for (int i = 0; i < n; ++i) {
      auto* watch = static_cast<LinkWatch*>(evs[i].data.ptr);
      if (!watch->take(&named)) {
        for (Peer& p : peers) due.push_back(&p);  // news lost to a lack of memory: look at all
        continue;
      }
      for (void* tag : named) due.push_back(static_cast<Peer*>(tag));
    }
  }
  std::printf("%s: %zu links watched; %llu looks at streams (%.1f a stream)\n", who, watches.size(), ull(looks),
              static_cast<double>(looks) / static_cast<double>(peers.size()));
  const char* most_looks = std::getenv("MANY_MAX_LOOKS_PER_STREAM");
  if (most_looks != nullptr && looks > std::strtoull(most_looks, nullptr, 10) * peers.size()) {
    std::fprintf(stderr, "%s: more than %s looks a stream: the waits look at streams without news\n", who, most_looks);
    return 1;
  }
  uint64_t device_kb = device_memory_kb();
  for (Peer& p : peers) {
    if (p.stream->close() != Status::kOk) return 1;
  }
  uint64_t smallest = ~uint64_t{0}, largest = 0, peer_smallest = ~uint64_t{0}, peer_largest = 0;
  for (Peer& p : peers) {
    smallest = std::min(smallest, p.stream->ring_size());
    largest = std::max(largest, p.stream->ring_size());
    peer_smallest = std::min(peer_smallest, p.stream->peer_ring_size());
    peer_largest = std::max(peer_largest, p.stream->peer_ring_size());
  }
  size_t on_links = 0;
  for (Peer& p : peers) on_links += p.stream->opened_on_link();
  std::printf("%s: %zu streams, %llu bytes each way on each, all checked; slept %llu times; rings %llu-%llu KiB, "
              "the peer's %llu-%llu KiB; %zu opened on a live link; %llu KiB of device queues\n",
              who, peers.size(), ull(bytes), ull(sleeps), ull(smallest / 1024), ull(largest / 1024),
              ull(peer_smallest / 1024), ull(peer_largest / 1024), on_links, ull(device_kb));
  const char* least = std::getenv("MANY_MIN_ON_LINKS");
  if (least != nullptr && on_links < std::strtoull(least, nullptr, 10)) {
    std::fprintf(stderr, "%s: fewer than %s streams opened on a live link\n", who, least);
    return 1;
  }
  const char* most = std::getenv("MANY_MAX_DEVICE_KB");
  if (most != nullptr && device_kb > std::strtoull(most, nullptr, 10)) {
    std::fprintf(stderr, "%s: the device maps %llu KiB of queues, more than %s\n", who, ull(device_kb), most);
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  StreamOptions options;
  const char* ring = std::getenv("MANY_RING_LOG2");
  options.ring_size_log2 = ring != nullptr ? static_cast<uint32_t>(std::atoi(ring)) : 16;
  const char* depth = std::getenv("MANY_DEPTH");
  options.recv_queue_depth = static_cast<uint16_t>(depth != nullptr ? std::atoi(depth) : 16);
  options.send_queue_depth = static_cast<uint16_t>(2 * options.recv_queue_depth + 32);
  const char* link_channels = std::getenv("MANY_LINK_CHANNELS");
  if (link_channels != nullptr) options.link_channels = static_cast<uint16_t>(std::atoi(link_channels));
  std::string_view mode = argc > 1 ? argv[1] : "";
  std::vector<Peer> peers;
  if (argc == 5 && mode == "server") {
    std::unique_ptr<StreamListener> listener = listen_on(argv[2], options);
    if (!listener) return 1;
    int n = std::atoi(argv[3]);
    for (int i = 0; i < n; ++i) {
      Peer p;
      p.stream = accept_one(*listener);
      if (!p.stream) return 1;
      p.receive_seed = p.stream->client_nonce();
      p.send_seed = p.receive_seed + 1;
      peers.push_back(std::move(p));
    }
    return drive(peers, std::strtoull(argv[4], nullptr, 10), "server");
  }
  if (argc == 6 && mode == "client") {
    int n = std::atoi(argv[4]);
    for (int i = 0; i < n; ++i) {
      Peer p;
      p.stream = connect_to(argv[2], argv[3], options);
      if (!p.stream) return 1;
      p.send_seed = p.stream->client_nonce();
      p.receive_seed = p.send_seed + 1;
      peers.push_back(std::move(p));
    }
    return drive(peers, std::strtoull(argv[5], nullptr, 10), "client");
  }
  std::fprintf(stderr, "usage: see the comment at the top of stream_many.cpp\n");
  return 2;
}
