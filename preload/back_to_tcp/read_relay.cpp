#include "back_to_tcp/read_relay.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "back_to_tcp/move_back.h"
#include "back_to_tcp/path_watcher.h"
#include "keep_forever.h"
#include "libc/real_calls.h"
#include "own_descriptors.h"
#include "rdma_stream.h"
#include "readiness/epoll_sets.h"
#include "readiness/polled_streams.h"
#include "registry/connection_path.h"
#include "registry/lent_streams.h"
#include "util/log.h"
#include "util/quiet_thread.h"
#include "util/saved_errno.h"

namespace tcp2rdma::preload {
namespace {

using transport::Status;

// How many of the peer's bytes the relay keeps queued for the readers at most: the stream's own
// ring holds more, and the peer's credits stop it when both are full, as a socket's window would.
constexpr size_t kWindow = 512 * 1024;
// How often a relay with nothing to do looks whether anybody still holds the connection.
constexpr int kIdleLookMs = 1000;

struct Relay {
  explicit Relay(TrackedSocket* s) : hold(s) {}
  SocketHold hold;
  transport::RdmaStream* stream = nullptr;  // the socket's own (own_stream), held with it
  int stop_fd = -1;                          // an eventfd: a pause or the end is asked for
  std::mutex mutex;
  std::condition_variable stopped;
  bool stop = false;     // under mutex
  bool running = false;  // under mutex: the thread is in the loop
  int pauses = 0;        // under mutex: RelayPause objects alive
};

struct Registry {
  std::mutex mutex;
  std::unordered_map<uint64_t, std::shared_ptr<Relay>> relays;  // by the socket's serial
};
Registry*& registry_slot() {
  static Registry* registry = new Registry;
  return registry;
}

std::shared_ptr<Relay> relay_of(uint64_t serial) {
  Registry* r = registry_slot();
  std::lock_guard lock(r->mutex);
  auto it = r->relays.find(serial);
  return it == r->relays.end() ? nullptr : it->second;
}

void forget_relay(uint64_t serial) {
  Registry* r = registry_slot();
  std::shared_ptr<Relay> gone;
  {
    std::lock_guard lock(r->mutex);
    auto it = r->relays.find(serial);
    if (it == r->relays.end()) return;
    gone = std::move(it->second);
    r->relays.erase(it);
  }
  if (gone->stop_fd >= 0) real().close(gone->stop_fd);
  // gone's hold goes last: it may be the socket's last reference (its end: tracked_socket.cpp).
}

int errno_of(Status s) { return s == Status::kTimeout ? ETIMEDOUT : ECONNRESET; }

enum class Fed : uint8_t { kBytes, kNothing, kFull, kOver, kPathFailed, kPeerMoved };

// One read from the stream into the queue, under the feed lock (tcp_prefix.h).
Fed feed_once(Relay* relay) {
  TcpPrefix& queue = relay->hold->prefix;
  std::lock_guard feeding(queue.feed_lock());
  iovec space[2];
  int pieces = queue.feed_space(space, kWindow);
  if (pieces == 0) return queue.fed() ? Fed::kFull : Fed::kOver;  // ended by a failover's set()
  size_t done = 0;
  Status s = relay->stream->read(space, pieces, transport::kNonBlocking, &done);
  if (s == Status::kOk && done > 0) {
    queue.commit(done);
    return Fed::kBytes;
  }
  switch (s) {
    case Status::kOk: queue.finish(TcpPrefix::Then::kEnd); return Fed::kOver;  // the peer's end
    case Status::kWouldBlock:
    case Status::kInterrupted: return Fed::kNothing;
    case Status::kMovedToTcp: queue.finish(TcpPrefix::Then::kKernel); return Fed::kPeerMoved;
    case Status::kPathFailed: return Fed::kPathFailed;  // the failover's set() adds the rest
    default:
      log_line("%s: the rdma stream failed (%s) while the parent relays it to a child: %s",
               connection_label(relay->hold.get()), transport::to_string(s), relay->stream->failure_detail().c_str());
      queue.finish(TcpPrefix::Then::kError, errno_of(s));
      return Fed::kOver;
  }
}

// The peer moved the connection back (its own fork, say), and the relay read up to its marker.
void after_peer_moved(Relay* relay) {
  TrackedSocket* socket = relay->hold.get();
  while (socket->being_moved()) sched_yield();
  if (relay->stream->moved()) complete_move_back(socket, descriptor_of(socket));
}

// The path failed: the watcher fails the connection over (its set() ends the queue's feeding after
// the bytes TCP brings back); a failover that could not happen leaves it fed, and the readers are told.
void after_path_failed(Relay* relay) {
  TrackedSocket* socket = relay->hold.get();
  (void)await_failover(socket, descriptor_of(socket), /*nonblocking=*/false);
  socket->prefix.finish(TcpPrefix::Then::kError, ECONNRESET);  // nothing when the failover ended it
}

// Nobody can read the connection any more: this process has no descriptor of it and no child holds it.
bool nobody_reads(Relay* relay) {
  TrackedSocket* socket = relay->hold.get();
  return socket->references() == 1 && !is_lent(socket->serial());
}

bool stop_asked(Relay* relay) {
  std::lock_guard lock(relay->mutex);
  return relay->stop;
}

// Sleeps on the stop eventfd up to `ms`; emptied when it rang.
void sleep_on_stop(Relay* relay, std::vector<pollfd>* fds, int ms) {
  int rc = real().poll(fds->data(), fds->size(), ms);
  if (rc > 0 && ((*fds)[0].revents & POLLIN)) {
    uint64_t asked;
    (void)!read(relay->stop_fd, &asked, sizeof asked);
  }
}

// Feeds the queue until asked to stop, or the stream ends, fails or moves (its last Fed), or nobody
// can read the connection any more (kOver).
Fed feed(Relay* relay) {
  PolledStreams polled;
  std::vector<pollfd> sleep;
  Fed last = Fed::kNothing;
  while (!stop_asked(relay)) {
    polled.next_round();
    transport::Readiness ready = polled.look(relay->stream, false);
    if (ready.readable || ready.moved || ready.failed) {
      last = feed_once(relay);
      if (last == Fed::kBytes) continue;
      if (last == Fed::kFull) {
        relay->hold->prefix.wait_room(kWindow, kIdleLookMs);
        continue;
      }
      if (last != Fed::kNothing) break;
    }
    sleep.assign(1, {relay->stop_fd, POLLIN, 0});
    polled.append_pollfds(&sleep);
    sleep_on_stop(relay, &sleep, polled.blind() ? 10 : kIdleLookMs);
    polled.note_fired(sleep.data() + 1);  // the next look takes the link's events that woke us
    if (nobody_reads(relay)) {
      last = Fed::kOver;
      break;
    }
  }
  polled.clear();
  return last;
}

// The stream ended (the queue says how): the relay keeps the socket while anybody may still read the
// queue, so that this process's last close does not hand an ended stream back (its peer may be gone).
void hold_while_read(Relay* relay) {
  std::vector<pollfd> sleep;
  while (!stop_asked(relay) && !nobody_reads(relay)) {
    sleep.assign(1, {relay->stop_fd, POLLIN, 0});
    sleep_on_stop(relay, &sleep, kIdleLookMs);
  }
}

// The thread: feeds the queue, then finishes what the way it stopped asks for. A pause (RelayPause)
// leaves the relay registered, to go on when the pause ends; any other end forgets it.
void run(std::shared_ptr<Relay> relay) {
  Fed last = feed(relay.get());
  if (last == Fed::kPeerMoved) after_peer_moved(relay.get());
  if (last == Fed::kPathFailed) after_path_failed(relay.get());
  if (last == Fed::kOver) hold_while_read(relay.get());
  bool paused = stop_asked(relay.get());
  {
    std::lock_guard lock(relay->mutex);
    relay->running = false;
    relay->stopped.notify_all();
  }
  if (paused) return;
  TrackedSocket* socket = relay->hold.get();
  // Bytes of the peer's that nobody will read: the kernel resets such a connection at its close.
  if (nobody_reads(relay.get()) && socket->prefix.size() > 0 && socket->stream() != nullptr) relay->stream->abort();
  forget_relay(socket->serial());
}

bool start_thread(const std::shared_ptr<Relay>& relay) {
  {
    std::lock_guard lock(relay->mutex);
    relay->stop = false;
    relay->running = true;
  }
  std::thread thread = start_quiet_thread([relay] { run(relay); });
  if (thread.joinable()) {
    thread.detach();
    return true;
  }
  std::lock_guard lock(relay->mutex);
  relay->running = false;
  return false;
}

}  // namespace

bool start_read_relay(TrackedSocket* socket, int channel, HandBack* answer) noexcept {
  SavedErrno keep_errno;
  transport::RdmaStream* stream = socket->stream();
  // An epoll set of ours waiting for its input would not be woken by bytes the relay takes: both
  // processes read the connection, and it moves back as for any claim.
  if (stream == nullptr || !socket->path_is(Path::kRdma) || stream->failover_pending() ||
      !socket->follows_fork.load(std::memory_order_relaxed) || !held_only_by(socket->serial(), channel) ||
      socket->prefix.present() || relay_of(socket->serial()) != nullptr || epoll_watches_input(stream)) {
    return false;
  }
  std::shared_ptr<Relay> relay;
  try {
    relay = std::make_shared<Relay>(socket);
  } catch (const std::bad_alloc&) {
    return false;
  }
  relay->stream = stream;
  {
    transport::OwnDescriptors window;
    relay->stop_fd = window.place(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  }
  if (relay->stop_fd < 0) return false;
  // The queue holds the window and, beyond it, what a move back or failover adds at the end: at most
  // what the stream's ring can hold.
  if (!socket->prefix.start_relay(kWindow + stream->ring_grows_to())) {
    real().close(relay->stop_fd);
    return false;
  }
  {
    Registry* r = registry_slot();
    std::lock_guard lock(r->mutex);
    try {
      r->relays.emplace(socket->serial(), relay);
    } catch (const std::bad_alloc&) {
      socket->prefix.finish(TcpPrefix::Then::kKernel);
      real().close(relay->stop_fd);
      return false;
    }
  }
  if (!start_thread(relay)) {
    // The queue is empty and nothing feeds it: the connection moves back as for any claim, and the
    // move's set_shared() ends the feeding.
    forget_relay(socket->serial());
    return false;
  }
  answer->outcome = HandBack::Outcome::kRelayed;
  answer->shared_prefix = socket->prefix.shareable();
  answer->relay_wake = socket->prefix.wake();
  log_line("%s: a child reads it: it stays on rdma here, and this process relays the peer's bytes to both",
           connection_label(socket));
  return true;
}

RelayPause::RelayPause(TrackedSocket* socket) noexcept {
  std::shared_ptr<Relay> relay = relay_of(socket->serial());
  if (!relay) return;
  serial_ = socket->serial();
  std::unique_lock lock(relay->mutex);
  ++relay->pauses;
  relay->stop = true;
  uint64_t one = 1;
  (void)!write(relay->stop_fd, &one, sizeof one);
  socket->prefix.wake_feeder();  // a relay waiting for room in the queue
  relay->stopped.wait(lock, [&] { return !relay->running; });
}

RelayPause::~RelayPause() {
  if (serial_ == 0) return;
  std::shared_ptr<Relay> relay = relay_of(serial_);
  if (!relay) return;
  bool resume;
  {
    std::lock_guard lock(relay->mutex);
    resume = --relay->pauses == 0 && !relay->running;
  }
  TrackedSocket* socket = relay->hold.get();
  if (resume && socket->prefix.fed() && socket->stream() != nullptr && start_thread(relay)) return;
  // Moved back (the queue is ended) or nothing to feed it any more.
  if (resume) {
    socket->prefix.finish(TcpPrefix::Then::kKernel);
    forget_relay(serial_);
  }
}

bool moved_back_for_epoll(TrackedSocket* socket, int fd, int op, const epoll_event* event) noexcept {
  if (op == EPOLL_CTL_DEL || event == nullptr || !(event->events & EPOLLIN) || !relay_of(socket->serial())) return false;
  transport::RdmaStream* stream = socket->stream();
  return stream != nullptr && move_back(socket, stream, fd, "its input is waited for in epoll while a child reads it");
}

std::vector<SocketHold> relayed_sockets() noexcept {
  std::vector<SocketHold> held;
  Registry* r = registry_slot();
  std::lock_guard lock(r->mutex);
  try {
    for (auto& [serial, relay] : r->relays) held.emplace_back(relay->hold.get());
  } catch (const std::bad_alloc&) {
  }
  return held;
}

void forget_read_relays_after_fork() noexcept {
  // The threads did not come along; the holds and descriptors in the parent's records stay unused.
  transport::keep_forever(std::exchange(registry_slot(), new Registry));
}

}  // namespace tcp2rdma::preload
