#include "back_to_tcp/path_watcher.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "back_to_tcp/failover.h"
#include "back_to_tcp/watcher_state.h"
#include "keep_forever.h"
#include "libc/real_calls.h"
#include "own_descriptors.h"
#include "rdma_stream.h"
#include "registry/socket_registry.h"
#include "registry/connection_path.h"
#include "registry/fd_table.h"
#include "registry/tracked_socket.h"
#include "stats/stats_writer.h"
#include "util/log.h"
#include "util/quiet_thread.h"
#include "util/signal_restart.h"

namespace tcp2rdma::preload {
namespace {

using namespace watcher;  // NOLINT: the state is this file's alone (watcher_state.h)

Watcher*& watcher_slot() {
  static Watcher* watcher = new Watcher;  // never destroyed: the thread runs until the process ends
  return watcher;
}

void run(Watcher* w);

// Descriptors above the application's range (own_descriptors.h), then the thread.
bool start_locked(Watcher* w) {
  if (w->running || w->cannot_run) return w->running;
  {
    transport::OwnDescriptors window;
    w->epfd = window.place(real().epoll_create1(EPOLL_CLOEXEC));
    w->wake_fd = window.place(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  }
  epoll_event ev{EPOLLIN, {.u64 = kWake}};
  if (w->epfd >= 0 && w->wake_fd >= 0 && real().epoll_ctl(w->epfd, EPOLL_CTL_ADD, w->wake_fd, &ev) == 0) {
    std::thread thread = start_quiet_thread([w] { run(w); });
    w->running = thread.joinable();
    if (w->running) thread.detach();
  }
  if (!w->running) {
    w->cannot_run = true;
    log_line("path watcher: cannot start (%s): a connection whose RDMA path fails is reset, not failed over",
             w->epfd < 0 || w->wake_fd < 0 ? "no descriptor" : "no thread");
  }
  return w->running;
}

void wake(Watcher* w) { (void)eventfd_write(w->wake_fd, 1); }

// The failover's own descriptor of fd's socket: the connection then outlives an application close()
// until the failover is over. Low (in the application's range) only when nothing is free above it.
int own_descriptor(int fd) {
  transport::OwnDescriptors window;
  return window.place_if_room(real().fcntl(fd, F_DUPFD_CLOEXEC, 0));
}

// Claims the failover of a socket on RDMA for the caller (Path::kRdma -> kFailingOver) and makes its
// descriptor; false when another thread has it already, or (reset) when it cannot be had.
bool claim(TrackedSocket* socket, int fd, int* tcp) {
  // Only this process's own stream fails over (a forked child's copy has none: own_stream).
  if (socket->own_stream() == nullptr || !socket->move_path(Path::kRdma, Path::kFailingOver)) return false;
  {
    auto numbers = hold_descriptor_numbers();  // fd is not freed between the check and the dup
    *tcp = fd_table().find(fd) == socket ? own_descriptor(fd) : -1;
  }
  if (*tcp < 0) {
    reset_instead_of_failover(socket, transport::Status::kReset, "no descriptor of its TCP socket left");
    return false;
  }
  return true;
}

void forget(Watcher* w, uint64_t serial) {
  std::lock_guard lock(w->mutex);
  w->watched.erase(serial);
}

// Runs the job's next steps; registers its descriptor for what it waits for, or ends it.
void advance(Watcher* w, uint64_t serial) {
  auto it = w->jobs.find(serial);
  if (it == w->jobs.end()) return;
  Job& job = it->second;
  short wanted = job.failover->step();
  // EPOLLPRI (no urgent data on our connections): only an error or hang-up wakes the job; tick()
  // steps it again soon, as nothing announces an acknowledgement.
  uint32_t events = (wanted & POLLIN ? uint32_t{EPOLLIN} : 0u) | (wanted & POLLOUT ? uint32_t{EPOLLOUT} : 0u) |
                    (wanted & POLLPRI ? uint32_t{EPOLLPRI} : 0u);
  int tcp = job.failover->tcp();
  if (events == 0) {
    if (job.registered != 0) real().epoll_ctl(w->epfd, EPOLL_CTL_DEL, tcp, nullptr);
    w->jobs.erase(it);  // closes its descriptor
    return;
  }
  if (events != job.registered) {
    epoll_event ev{events, {.u64 = serial | kJobBit}};
    real().epoll_ctl(w->epfd, job.registered != 0 ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, tcp, &ev);
    job.registered = events;
  }
}

void start_job(Watcher* w, SocketHold socket, int tcp) {
  uint64_t serial = socket->serial();
  forget(w, serial);  // the job looks after the connection now
  w->jobs[serial].failover = std::make_unique<Failover>(std::move(socket), tcp);
  advance(w, serial);
}

void begin(Watcher* w, SocketHold socket, int fd) {
  int tcp = -1;
  if (claim(socket.get(), fd, &tcp)) start_job(w, std::move(socket), tcp);
}

// Looks at one watched connection: its stream's news and (`probe`) a keepalive. Forgets it once it is
// gone or off RDMA for good; fails it over when its path failed.
void look_at(Watcher* w, uint64_t serial, int fd, bool probe) {
  SocketHold socket = SocketHold::live(serial);
  Path path = socket ? socket->path() : Path::kTcp;
  if (path == Path::kMovingBack || path == Path::kFailingOver) return;  // another thread has it now
  transport::RdmaStream* stream = path == Path::kRdma ? socket->own_stream() : nullptr;
  if (stream == nullptr) return forget(w, serial);
  transport::RdmaStream::PathCheck check = stream->check_path(probe);
  if (check.failover_due) return begin(w, std::move(socket), fd);
  if (check.over) return forget(w, serial);
  // The stats segment's view of the stream (docs/stats.md): rings grow and shrink, stalls add up.
  transport::StreamCounters counters = stream->counters();
  stats::slot_refresh(socket->stats_slot.load(std::memory_order_relaxed), static_cast<uint32_t>(stream->ring_size() >> 10),
                      static_cast<uint32_t>(stream->peer_ring_size() >> 10), counters.credit_stalls,
                      counters.wakeups_received);
}

// The watch on a connection's TCP socket fired: while it is on RDMA, its TCP socket carries only the
// peer's failover record or the peer's end.
void tcp_news(Watcher* w, uint64_t serial) {
  int fd = -1;
  {
    std::lock_guard lock(w->mutex);
    auto it = w->watched.find(serial);
    if (it == w->watched.end()) return;
    fd = it->second.fd;
  }
  SocketHold socket = SocketHold::live(serial);
  if (!socket || !socket->path_is(Path::kRdma)) return;
  ssize_t r = 0;
  {
    auto numbers = hold_descriptor_numbers();  // fd is not freed between the check and the peek
    if (fd_table().find(fd) != socket.get()) return;
    char byte = 0;
    r = real().recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (r < 0 && (errno == EAGAIN || errno == EINTR)) {
      epoll_event ev{EPOLLIN | EPOLLRDHUP | EPOLLONESHOT, {.u64 = serial}};
      real().epoll_ctl(w->epfd, EPOLL_CTL_MOD, fd, &ev);
      return;
    }
  }
  // An end (or an error): the peer closed its socket, and its stream ends on its own; the stream is
  // left alone (progress now would send credit updates into a queue pair the peer's close is about to
  // destroy). Should the path fail later, there is no one to fail over with: the failover's first
  // send says so (a reset). The watch stays spent.
  if (r <= 0) return;
  // A byte: the peer's failover record, unless the bytes are the application's after a move back.
  transport::RdmaStream::PathCheck check = socket->own_stream()->check_path(false);
  if (check.moving || check.over) return;
  begin(w, std::move(socket), fd);
}

void take_requests(Watcher* w) {
  eventfd_t n = 0;
  (void)eventfd_read(w->wake_fd, &n);
  std::vector<Request> requests;
  {
    std::lock_guard lock(w->mutex);
    requests.swap(w->requests);
  }
  for (Request& r : requests) start_job(w, std::move(r.socket), r.tcp);
}

// Keepalives and looks that are due; failovers whose peer never answers. Returns the time until the
// next thing due (ms, -1: nothing).
int tick(Watcher* w) {
  auto now = Clock::now();
  std::vector<std::pair<uint64_t, Watched>> due;
  auto next = Clock::time_point::max();
  {
    std::lock_guard lock(w->mutex);
    while (!w->due.empty() && w->due.top().first <= now) {
      auto [at, serial] = w->due.top();
      w->due.pop();
      auto it = w->watched.find(serial);
      if (it == w->watched.end() || it->second.next != at) continue;  // forgotten, or due at another time
      Watched& watched = it->second;
      due.emplace_back(serial, watched);
      watched.next = now + (watched.every.count() > 0 ? watched.every : kIdleLook);
      w->due.emplace(watched.next, serial);
    }
  }
  for (auto& [serial, watched] : due) look_at(w, serial, watched.fd, watched.every.count() > 0);
  std::vector<uint64_t> unanswered, confirming;
  for (auto& [serial, job] : w->jobs) {
    if (job.failover->awaiting_acknowledgement()) {
      confirming.push_back(serial);
      next = std::min(next, now + kConfirmLook);
    }
    bool waiting = job.failover->waiting_for_answer();
    uint64_t received = job.failover->received();
    if (waiting && (!job.waiting || received != job.received)) job.waiting_since = now;  // slow is not silent
    job.waiting = waiting;
    job.received = received;
    if (waiting && now - job.waiting_since >= kAnswerTimeout) unanswered.push_back(serial);
    if (waiting) next = std::min(next, now + std::chrono::seconds(1));
  }
  for (uint64_t serial : unanswered) {
    w->jobs[serial].failover->give_up_unanswered();
    advance(w, serial);
  }
  for (uint64_t serial : confirming) advance(w, serial);
  {
    std::lock_guard lock(w->mutex);
    if (!w->due.empty()) next = std::min(next, w->due.top().first);  // added meanwhile too
    w->planned = next;
  }
  if (next == Clock::time_point::max()) return -1;
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now()).count() + 1;
  return static_cast<int>(std::clamp<long long>(ms, 0, 60 * 1000));
}

void run(Watcher* w) {
  epoll_event events[64];
  int sleep_ms = -1;
  for (;;) {
    int n = real().epoll_wait(w->epfd, events, 64, sleep_ms);
    if (w->retired.load(std::memory_order_acquire)) {
      real().close(w->epfd);
      real().close(w->wake_fd);
      return;
    }
    for (int i = 0; i < n; ++i) {
      uint64_t data = events[i].data.u64;
      if (data == kWake) {
        take_requests(w);
      } else if (data & kJobBit) {
        advance(w, data & ~kJobBit);
      } else {
        tcp_news(w, data);
      }
    }
    sleep_ms = tick(w);
    if (int held_ms = age_held(w); held_ms >= 0 && (sleep_ms < 0 || held_ms < sleep_ms)) sleep_ms = held_ms;
  }
}

}  // namespace

void watch_path(TrackedSocket* socket, int fd) noexcept {
  Watcher* w = watcher_slot();
  transport::RdmaStream* stream = socket->own_stream();
  if (stream == nullptr) return;
  std::lock_guard lock(w->mutex);
  if (!start_locked(w)) return;
  auto every = std::chrono::milliseconds(std::max(stream->keepalive_ms(), 0));
  auto next = Clock::now() + (every.count() > 0 ? every : kIdleLook);
  w->watched[socket->serial()] = {fd, every, next};
  w->due.emplace(next, socket->serial());
  epoll_event ev{EPOLLIN | EPOLLRDHUP | EPOLLONESHOT, {.u64 = socket->serial()}};
  if (real().epoll_ctl(w->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) real().epoll_ctl(w->epfd, EPOLL_CTL_MOD, fd, &ev);
  if (next < w->planned) {
    w->planned = next;
    wake(w);  // it sleeps until its own next look, later than this one's
  }
}

void push_held_later(TrackedSocket* socket) noexcept {
  Watcher* w = watcher_slot();
  if (socket->held_listed_by.exchange(w->generation) == w->generation) return;  // listed: it ticks
  {
    std::lock_guard lock(w->mutex);
    if (start_locked(w)) {
      w->held.push_back(socket->serial());
      if (!std::exchange(w->held_ticking, true)) wake(w);
      return;
    }
  }
  socket->held_listed_by.store(0);
  if (transport::RdmaStream* stream = socket->own_stream()) stream->push();  // no watcher: nothing waits
}

FailoverWait await_failover(TrackedSocket* socket, int fd, bool nonblocking) noexcept {
  int tcp = -1;
  if (claim(socket, fd, &tcp)) {
    Watcher* w = watcher_slot();
    std::unique_lock lock(w->mutex);
    if (start_locked(w)) {
      w->requests.push_back({SocketHold(socket), tcp});
      wake(w);
    } else {
      lock.unlock();
      real().close(tcp);
      reset_instead_of_failover(socket, transport::Status::kReset, "no path watcher");
    }
  }
  if (nonblocking) return socket->path_is(Path::kFailingOver) ? FailoverWait::kWouldBlock : FailoverWait::kOver;
  // A blocking call sleeps until the failover is over: a few milliseconds after the peer's record, or
  // as long as TCP itself cannot carry it (an outage), as a blocked call on TCP would wait. The sleep
  // is poll(2)'s, so that a signal handler interrupts it as it would the kernel's call.
  for (int ms = 1; socket->path_is(Path::kFailingOver); ms = std::min(ms * 2, 20)) {
    if (real().poll(nullptr, 0, ms) < 0 && errno == EINTR && interrupted_call_fails()) {
      return FailoverWait::kInterrupted;
    }
  }
  return FailoverWait::kOver;
}

void forget_path_watcher_after_fork() noexcept {
  Watcher* parent = std::exchange(watcher_slot(), new Watcher);
  // The parent's epoll set and eventfd are its own; this process closes its copies of them.
  if (parent->epfd >= 0) real().close(parent->epfd);
  if (parent->wake_fd >= 0) real().close(parent->wake_fd);
  transport::keep_forever(parent);
}

void retire_path_watcher() noexcept {
  Watcher* old = std::exchange(watcher_slot(), new Watcher);
  std::lock_guard lock(old->mutex);
  if (old->running) {
    old->retired.store(true, std::memory_order_release);
    wake(old);
  }
  transport::keep_forever(old);  // its thread may still be reading it
}

}  // namespace tcp2rdma::preload
