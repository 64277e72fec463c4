#include "registry/stream_closer.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "keep_forever.h"
#include "own_descriptors.h"
#include "libc/real_calls.h"
#include "rdma_stream.h"
#include "registry/lent_streams.h"
#include "registry/tracked_socket.h"
#include "util/log.h"
#include "util/quiet_thread.h"

namespace tcp2rdma::preload {
namespace {

using transport::Deadline;

struct Closing {
  transport::RdmaStream* stream;
  Deadline deadline;
  uint64_t hand_back_serial = 0;  // not 0: handed back to the children that hold it, not ended
  int tcp = -1;                   // the module's descriptor of its TCP socket, for a failover (or -1)
};

// Made on first use and never destroyed (exit handlers use them), anew in a forked child.
struct Closer {
  std::mutex mutex;
  std::condition_variable work;  // a stream was handed over
  std::condition_variable idle;  // everything handed over has ended
  std::deque<Closing> queue;
  int busy = 0;  // streams taken off the queue and not yet ended
  std::vector<int> tcp;  // the descriptors of every Closing handed over and not yet ended
  bool running = false;
  Deadline latest{Deadline::Clock::time_point{}};  // the last deadline of any stream handed over
};
Closer*& closer_slot() {
  static Closer* closer = new Closer;
  return closer;
}

// The failover of a closed stream (back_to_tcp/failover.h, fail_over_closed, sets it): the registry
// does not depend on back_to_tcp.
std::atomic<ClosedFailover> closed_failover{nullptr};

// The end of a stream in order within its deadline, else a reset; or, when its path failed first,
// its failover on TCP. Closes c.tcp either way.
transport::Status end_in_order(const Closing& c) {
  transport::Status closed = c.stream->close(c.deadline);
  ClosedFailover fail_over = closed_failover.load(std::memory_order_acquire);
  if (closed == transport::Status::kPathFailed && c.tcp >= 0 && fail_over != nullptr) return fail_over(c.stream, c.tcp);
  if (c.tcp >= 0) real().close(c.tcp);
  if (closed != transport::Status::kPathFailed) return closed;
  c.stream->give_up_path(transport::Status::kReset, "no descriptor of its TCP socket was kept at its close");
  log_line("a closed connection's rdma path failed (%s): no failover, the peer reads a reset",
           c.stream->failure_detail().c_str());
  return transport::Status::kReset;
}

void forget_tcp(int tcp) {
  if (tcp < 0) return;
  Closer* closer = closer_slot();
  std::lock_guard lock(closer->mutex);
  std::erase(closer->tcp, tcp);
}

void end_one(const Closing& c) {
  // Off the list before it may be closed: a fork after that must not have the child close a number
  // the parent may have given to another file meanwhile (a child that forks during a long failover
  // keeps its copy open instead, until it exits).
  forget_tcp(c.tcp);
  if (c.hand_back_serial != 0) {
    hand_back(c.stream, c.hand_back_serial);
    if (c.tcp >= 0) real().close(c.tcp);
  } else {
    log_unclean_end(c.stream, end_in_order(c));
  }
  delete c.stream;
}

void run(Closer* closer) {
  std::unique_lock lock(closer->mutex);
  for (;;) {
    closer->work.wait(lock, [&] { return !closer->queue.empty(); });
    Closing c = closer->queue.front();
    closer->queue.pop_front();
    ++closer->busy;
    lock.unlock();
    end_one(c);
    lock.lock();
    --closer->busy;
    if (closer->queue.empty() && closer->busy == 0) closer->idle.notify_all();
  }
}

bool start_thread(Closer* closer) {
  std::thread thread = start_quiet_thread([closer] { run(closer); });
  if (!thread.joinable()) return false;
  thread.detach();
  return true;
}

// Queues c for the thread (false: there is none to be had).
bool queue(const Closing& c) {
  Closer* closer = closer_slot();
  std::lock_guard lock(closer->mutex);
  if (!closer->running && !(closer->running = start_thread(closer))) return false;
  if (c.tcp >= 0) closer->tcp.push_back(c.tcp);
  closer->queue.push_back(c);
  closer->latest = Deadline::later(closer->latest, c.deadline);
  closer->work.notify_one();
  return true;
}

}  // namespace

void keep_tcp_for_end(TrackedSocket* socket, int fd) noexcept {
  // The caller holds the descriptor's reference: one left is the last descriptor and no holder. A
  // holder that comes meanwhile (the path watcher's look) only delays the socket's end, which then
  // finds this descriptor kept all the same; one there now means no descriptor is kept (the end is
  // a reset should its path fail, as before).
  if (socket->references() != 1 || !socket->path_is(Path::kRdma) || socket->own_stream() == nullptr ||
      socket->linger_seconds.load() == 0 || socket->kept_tcp.load() >= 0) {
    return;
  }
  transport::OwnDescriptors window;
  int tcp = window.place(real().fcntl(fd, F_DUPFD_CLOEXEC, 0));
  if (tcp >= 0 && socket->kept_tcp.exchange(tcp) >= 0) real().close(tcp);  // another close kept one first
}

void set_closed_failover(ClosedFailover run) noexcept { closed_failover.store(run, std::memory_order_release); }

void close_later(transport::RdmaStream* stream, int linger_seconds, int tcp) noexcept {
  if (ends_with_reset(stream, linger_seconds)) {
    stream->abort();  // nothing to wait for
    delete stream;
    if (tcp >= 0) real().close(tcp);
    return;
  }
  // The peer must be able to read everything, then the end: the stream's own timeout bounds it, and
  // a linger time above zero, as the kernel's, makes this call wait (up to that time) itself.
  auto wait = std::chrono::milliseconds(stream->timeout_ms());
  if (linger_seconds > 0) wait = std::min<std::chrono::milliseconds>(wait, std::chrono::seconds(linger_seconds));
  Closing c{stream, Deadline::in(wait), 0, tcp};
  if (linger_seconds > 0) {
    end_one(c);
    return;
  }
  stream->shutdown_write();  // queued now, in order after every byte written
  if (!queue(c)) end_one(c);  // no thread to be had: here, bounded all the same
}

void hand_back_later(transport::RdmaStream* stream, uint64_t serial) noexcept {
  Closing c{stream, Deadline::in_ms(2 * stream->timeout_ms()), serial};
  if (!queue(c)) end_one(c);
}

void finish_closing() noexcept {
  Closer* closer = closer_slot();
  std::unique_lock lock(closer->mutex);
  // Each stream has its own deadline; the last of them bounds the wait (plus a little for the thread).
  closer->idle.wait_until(lock, closer->latest.at() + std::chrono::milliseconds(100),
                          [&] { return closer->queue.empty() && closer->busy == 0; });
}

void forget_closing_after_fork() noexcept {
  // The parent's streams, its lock; the descriptors it kept of their TCP sockets are copies here, and
  // would keep those connections open after the parent's failover ended them.
  Closer* parent = std::exchange(closer_slot(), new Closer);
  for (int tcp : parent->tcp) real().close(tcp);
  transport::keep_forever(parent);
}

}  // namespace tcp2rdma::preload
