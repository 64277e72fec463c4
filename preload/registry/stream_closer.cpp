#include "registry/stream_closer.h"

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>

#include "keep_forever.h"
#include "rdma_stream.h"
#include "registry/lent_streams.h"
#include "registry/tracked_socket.h"
#include "util/quiet_thread.h"

namespace tcp2rdma::preload {
namespace {

using transport::Deadline;

struct Closing {
  transport::RdmaStream* stream;
  Deadline deadline;
  uint64_t hand_back_serial = 0;  // not 0: handed back to the children that hold it, not ended
};

// Made on first use and never destroyed (exit handlers use them), anew in a forked child.
struct Closer {
  std::mutex mutex;
  std::condition_variable work;  // a stream was handed over
  std::condition_variable idle;  // everything handed over has ended
  std::deque<Closing> queue;
  int busy = 0;  // streams taken off the queue and not yet ended
  bool running = false;
  Deadline latest{Deadline::Clock::time_point{}};  // the last deadline of any stream handed over
};
Closer*& closer_slot() {
  static Closer* closer = new Closer;
  return closer;
}

void end_one(const Closing& c) {
  if (c.hand_back_serial != 0) {
    hand_back(c.stream, c.hand_back_serial);
  } else {
    log_unclean_end(c.stream, c.stream->close(c.deadline));  // in order within the deadline, else a reset
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
  closer->queue.push_back(c);
  closer->latest = Deadline::later(closer->latest, c.deadline);
  closer->work.notify_one();
  return true;
}

}  // namespace

void close_later(transport::RdmaStream* stream, int linger_seconds) noexcept {
  if (ends_with_reset(stream, linger_seconds)) {
    stream->abort();  // nothing to wait for
    delete stream;
    return;
  }
  // The peer must be able to read everything, then the end: the stream's own timeout bounds it, and
  // a linger time above zero, as the kernel's, makes this call wait (up to that time) itself.
  auto wait = std::chrono::milliseconds(stream->timeout_ms());
  if (linger_seconds > 0) wait = std::min<std::chrono::milliseconds>(wait, std::chrono::seconds(linger_seconds));
  Closing c{stream, Deadline::in(wait)};
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
  transport::keep_forever(std::exchange(closer_slot(), new Closer));  // the parent's streams, its lock
}

}  // namespace tcp2rdma::preload
