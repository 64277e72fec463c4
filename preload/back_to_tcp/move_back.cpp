#include "back_to_tcp/move_back.h"

#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <new>
#include <vector>

#include "libc/real_calls.h"
#include "back_to_tcp/read_relay.h"
#include "rdma_stream.h"
#include "readiness/epoll_sets.h"
#include "registry/connection_path.h"
#include "registry/fd_table.h"
#include "registry/tracked_socket.h"
#include "registry/upgrade_session.h"
#include "util/log.h"
#include "util/saved_errno.h"

namespace tcp2rdma::preload {

bool move_back(TrackedSocket* socket, transport::RdmaStream* stream, int fd, const char* why) noexcept {
  SavedErrno keep_errno;
  RelayPause pause(socket);  // a child's relay takes nothing more: the move adds the rest after its bytes
  // Ours to move (move_streams_back may have begun it), unless the peer's move got there first.
  if (!socket->move_path(Path::kRdma, Path::kMovingBack) && !socket->moving_back()) return socket->back_on_tcp();
  std::vector<uint8_t> unread;
  bool peer_ended = false;
  auto started = std::chrono::steady_clock::now();
  transport::Status s = stream->move_to_tcp(&unread, &peer_ended);
  if (s == transport::Status::kOk && !socket->prefix.set(unread, peer_ended)) {
    // No memory for the prefix: the bytes go back into the stream, which serves them before telling
    // the readers to go on on TCP; the connection stays this process's (a child's copy fails).
    log_line("%s: stays on rdma at %s: no memory for the %zu bytes to keep", connection_label(socket), why, unread.size());
    stream->set_unread_prefix(std::move(unread));
    s = transport::Status::kResources;
  } else if (s == transport::Status::kOk) {
    // The prefix is set before the mark: a call that sees the socket back on TCP must find it.
    size_t n = unread.size();
    complete_move_back(socket, fd, /*by_mover=*/true);
    auto us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - started);
    log_line("%s: back on tcp before %s (%zu bytes of the peer's kept to read first%s; %lld us)", connection_label(socket),
             why, n, peer_ended ? ", then its end" : "", static_cast<long long>(us.count()));
  } else {
    log_line("%s: stays on rdma at %s: the peer did not answer the move to tcp (%s)", connection_label(socket), why,
             transport::to_string(s));
  }
  if (s != transport::Status::kOk) socket->move_path(Path::kMovingBack, Path::kRdma);  // it stays on RDMA
  return s == transport::Status::kOk;
}

void move_streams_back(const char* why, bool returning) noexcept {
  SavedErrno keep_errno;
  // Every marker first, then each move's end: the peers answer together, and a process with many
  // connections waits about one round trip, not one per connection. From the first step on, the
  // socket is marked as moving: another thread's call that meets the peer's marker waits for this
  // one to finish the move (held: the socket stays while we work on it, whatever other threads close).
  std::vector<std::pair<int, SocketHold>> moving;
  std::vector<std::unique_ptr<RelayPause>> pauses;  // a relay stops before our marker goes out
  for_each_tracked_fd([&](int fd, SocketHold& socket) {
    transport::RdmaStream* stream = socket->stream();
    if (stream == nullptr || !socket->follows_fork.load(std::memory_order_relaxed)) return;
    try {
      pauses.push_back(std::make_unique<RelayPause>(socket.get()));
    } catch (const std::bad_alloc&) {
      return;  // stays on RDMA: a child's copy fails loudly, as after a move the peer did not answer
    }
    // A dup'd descriptor finds the move begun already; it is kept too, to finish the move through it
    // should the first descriptor be closed meanwhile.
    if (socket->move_path(Path::kRdma, Path::kMovingBack)) {
      stream->start_move_to_tcp(returning);
    } else if (!socket->moving_back()) {
      return;
    }
    moving.emplace_back(fd, std::move(socket));
  });
  for (auto& [fd, socket] : moving) {
    // A dup'd descriptor finds its socket back on TCP already (stream() is null).
    transport::RdmaStream* stream = socket->stream();
    if (stream != nullptr && fd_table().find(fd) == socket.get()) {
      if (move_back(socket.get(), stream, fd, why) && returning) {
        socket->returns.hurry(std::chrono::steady_clock::now());
      }
    } else {
      socket->move_path(Path::kMovingBack, Path::kRdma);
    }
  }
}

int descriptor_of(const TrackedSocket* socket) noexcept {
  int end = fd_table().high_water();
  for (int fd = 0; fd < end; ++fd) {
    if (fd_table().find(fd) == socket) return fd;
  }
  return -1;
}

namespace {

// What is left of a prefix, taken whole for a child.
HandBack prefix_for_child(TrackedSocket* socket) noexcept {
  HandBack answer;
  answer.then_end = socket->prefix.then_end();
  // A queue made to be shared (a move back for a child): the child takes from it beside us.
  if ((answer.shared_prefix = socket->prefix.shareable())) {
    answer.outcome = HandBack::Outcome::kMoved;
    return answer;
  }
  answer.outcome = socket->prefix.take_all(&answer.bytes) ? HandBack::Outcome::kMoved : HandBack::Outcome::kParents;
  return answer;
}

}  // namespace

HandBack move_back_for_child(TrackedSocket* socket, const char* why) noexcept {
  SavedErrno keep_errno;
  RelayPause pause(socket);  // a child's relay takes nothing more: the move adds the rest after its bytes
  // Another thread of ours may be moving it (the peer's move, a failover): its end is waited for.
  for (int i = 0; i < 1000 && socket->being_moved(); ++i) usleep(10000);
  if (socket->back_on_tcp()) return prefix_for_child(socket);
  transport::RdmaStream* stream = socket->stream();
  HandBack answer;
  answer.outcome = HandBack::Outcome::kParents;
  if (stream == nullptr || !socket->move_path(Path::kRdma, Path::kMovingBack)) {
    return socket->back_on_tcp() ? prefix_for_child(socket) : answer;
  }
  int fd = descriptor_of(socket);
  std::vector<uint8_t> unread;
  bool peer_ended = false;
  auto started = std::chrono::steady_clock::now();
  transport::Status s = stream->move_to_tcp(&unread, &peer_ended);
  // The peer's unread bytes stay this process's too: the child that claims may never read them (it
  // writes once and exits), and the kernel would keep them for whichever process reads first.
  bool shared = s == transport::Status::kOk && socket->prefix.set_shared(unread, peer_ended);
  if (s != transport::Status::kOk || (!shared && peer_ended && !socket->prefix.set({}, true))) {
    if (s == transport::Status::kOk) stream->set_unread_prefix(std::move(unread));  // no memory: ours again
    socket->move_path(Path::kMovingBack, Path::kRdma);
    log_line("%s: stays on rdma in this process, not moved for %s: %s", connection_label(socket), why,
             s == transport::Status::kOk ? "no memory for the end" : transport::to_string(s));
    return answer;
  }
  // Our sending side's end, if any, is shut down on the shared socket here (complete_move_back); the
  // child needs to do it only when this process had no descriptor left to do it with.
  answer.write_shut = fd < 0 && stream->write_was_shut();
  complete_move_back(socket, fd, /*by_mover=*/true);
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - started);
  // Counted from the queue when shared: a relay's queue holds the bytes it took for the child too.
  log_line("%s: back on tcp for %s (%zu bytes of the peer's %s%s; %lld us)", connection_label(socket), why,
           shared ? socket->prefix.size() : unread.size(), shared ? "shared with the child" : "for the child",
           peer_ended ? ", then its end" : "", static_cast<long long>(us.count()));
  answer.outcome = HandBack::Outcome::kMoved;
  answer.then_end = peer_ended;
  if (shared) {
    answer.shared_prefix = socket->prefix.shareable();
  } else {
    answer.bytes = std::move(unread);
  }
  return answer;
}

void complete_move_back(TrackedSocket* socket, int fd, bool by_mover) noexcept {
  epoll_move_back(socket, fd, by_mover);
}

}  // namespace tcp2rdma::preload
