// The path watcher's state (path_watcher.cpp and held_pushes.cpp alone include this): the
// connections it watches, the failovers it runs, the held messages it pushes, and its timings.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <atomic>
#include <mutex>
#include <queue>
#include <unordered_map>
#include <utility>
#include <vector>

#include "back_to_tcp/failover.h"
#include "registry/tracked_socket.h"

namespace tcp2rdma::preload::watcher {

using Clock = std::chrono::steady_clock;

// The watcher's epoll data: 0 is its wake-up eventfd, a socket's serial (never 0) its watch on the
// application's descriptor, the serial with kJobBit its failover's own descriptor.
constexpr uint64_t kWake = 0;
constexpr uint64_t kJobBit = uint64_t{1} << 63;
// A connection whose keepalive is off (0) is still looked at this often, to forget it once closed.
constexpr auto kIdleLook = std::chrono::seconds(60);
// How long the peer's kernel may hold all of our failover (record, resend) while nothing of the
// peer's comes. Its watcher answers within a round trip of seeing our record and resends at once;
// this only ends a failover whose peer can never answer (its module has no watcher, or lost the
// connection), as TCP ends a connection whose peer is gone.
constexpr auto kAnswerTimeout = std::chrono::seconds(60);
// How often a failover waiting for the peer's kernel to acknowledge the last of ours looks again.
constexpr auto kConfirmLook = std::chrono::milliseconds(5);

struct Watched {
  int fd;
  std::chrono::milliseconds every;  // the stream's keepalive interval (0: none, looked at kIdleLook)
  Clock::time_point next;
};

struct Request {  // a failover an application's call asked for
  SocketHold socket;
  int tcp;  // its own descriptor of the socket (claim)
};

struct Job {
  std::unique_ptr<Failover> failover;
  uint32_t registered = 0;  // its events in the epoll set (0: not in it)
  bool waiting = false;     // all of ours is with the peer's kernel, and the peer's is still due
  uint64_t received = 0;    // of the peer's, when we last looked
  Clock::time_point waiting_since{};
};

// When each watched connection is due next, earliest first: (time, serial). An entry whose time is
// no longer its connection's `next` (forgotten, or watched again) is dropped when it comes up. The
// watcher wakes for every event of every connection, so a tick may not walk all of them: with 2000
// connections that walk was 7 % of an asyncio client's CPU (perf).
using DueQueue = std::priority_queue<std::pair<Clock::time_point, uint64_t>,
                                     std::vector<std::pair<Clock::time_point, uint64_t>>, std::greater<>>;

// Each watcher made names itself anew, a forked child's and a successor's after a change of
// credentials too: a socket listed by the one before (TrackedSocket::held_listed_by) is not listed.
inline uint32_t next_watcher_generation() {
  static std::atomic<uint32_t> made{0};
  return ++made;
}

struct Watcher {
  const uint32_t generation = next_watcher_generation();
  std::mutex mutex;  // watched, due, requests and the start; a leaf: nothing is called under it
  std::unordered_map<uint64_t, Watched> watched;  // by socket serial
  DueQueue due;
  std::vector<Request> requests;
  bool running = false;
  bool cannot_run = false;
  Clock::time_point planned = Clock::time_point::max();  // when the thread wakes next by itself
  int epfd = -1;
  int wake_fd = -1;
  std::unordered_map<uint64_t, Job> jobs;  // the watcher thread's alone
  std::atomic<bool> retired{false};  // replaced after a change of credentials: its thread ends
  // Sockets whose stream holds a message (push_held_later), by serial; while there are any the
  // watcher looks at them every kHeldTick (held_ticking).
  std::vector<uint64_t> held;
  bool held_ticking = false;
  int held_idle_ticks = 0;  // ticks in a row that found nothing held
  Clock::time_point held_aged{};  // the watcher thread's alone
};

constexpr auto kHeldTick = std::chrono::milliseconds(100);
constexpr int kHeldIdleTicks = 10;  // the watcher stops ticking after a second with nothing held
// Pushes the held messages that two ticks have seen (held_pushes.cpp); returns the ms until the
// next tick is due, or -1 when nothing is held any more.
int age_held(Watcher* w);

}  // namespace tcp2rdma::preload::watcher
