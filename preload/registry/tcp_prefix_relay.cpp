// A TcpPrefix fed by a read relay (tcp_prefix.h, back_to_tcp/read_relay.h): the parent's relay thread adds
// the peer's bytes as they come off the stream, readers in both processes take them, and an eventfd
// they share rings when something comes.
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>
#include <new>

#include "libc/real_calls.h"
#include "own_descriptors.h"
#include "registry/tcp_prefix.h"
#include "registry/tcp_prefix_shared.h"
#include "util/robust_mutex.h"

namespace tcp2rdma::preload {

bool TcpPrefix::start_relay(size_t capacity) {
  if (!replaceable() || capacity == 0) return false;
  int bell = -1;
  {
    transport::OwnDescriptors window;  // not a number of the application's
    bell = window.place(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  }
  if (bell < 0) return false;
  std::shared_ptr<const int> wake;
  try {
    wake = hold_memfd(bell);
  } catch (const std::bad_alloc&) {
    real().close(bell);
    return false;
  }
  void* memory = nullptr;
  size_t length = 0;
  if (!map_memfd(capacity, "tcp2rdma-relay", &memory, &length)) return false;
  wake_.store(std::move(wake));
  auto* s = static_cast<Shared*>(memory);
  s->fed = true;  // before publish's update_present: a reader of the empty queue waits
  s->relay = true;
  s->feeder = getpid();
  if (publish(memory, length, {}, false)) return true;
  memfd_.store(nullptr);
  wake_.store(nullptr);
  return false;
}

bool TcpPrefix::adopt_relay(const std::shared_ptr<const int>& held, const std::shared_ptr<const int>& wake) {
  if (!wake) return false;
  wake_.store(wake);
  if (adopt_mapping(held) && relayed()) return true;
  wake_.store(nullptr);
  return false;
}

std::shared_ptr<const int> TcpPrefix::wake() const noexcept { return wake_.load(); }

bool TcpPrefix::relayed() const noexcept {
  Shared* s = shared_.load(std::memory_order_acquire);
  return s != nullptr && s->relay;  // set before the mapping is published, never changed
}

bool TcpPrefix::fed() const noexcept {
  Shared* s = shared_.load(std::memory_order_acquire);
  if (s == nullptr || !s->relay) return false;
  RobustLock lock(&s->mutex);
  s->check(mapped_);
  return s->fed;
}

bool TcpPrefix::readable() const noexcept {
  Shared* s = shared_.load(std::memory_order_acquire);
  if (s == nullptr) return false;
  RobustLock lock(&s->mutex);
  s->check(mapped_);
  return s->begin != s->end || !s->fed;
}

void TcpPrefix::ring_bell() const noexcept {
  if (std::shared_ptr<const int> bell = wake_.load()) {
    uint64_t one = 1;
    (void)!write(*bell, &one, sizeof one);
  }
}

int TcpPrefix::wait_for_bytes(int timeout_ms) {
  if (readable_or_arm()) return 1;
  std::shared_ptr<const int> bell = wake_.load();
  if (!bell) return 1;  // not a relay's queue: nothing to wait for
  pollfd p{*bell, POLLIN, 0};
  return real().poll(&p, 1, timeout_ms);
}

bool TcpPrefix::readable_or_arm() {
  if (readable()) return true;
  // The bell is emptied first, then the queue looked at again: bytes committed after the look ring it.
  if (std::shared_ptr<const int> bell = wake_.load()) {
    uint64_t rung;
    (void)!read(*bell, &rung, sizeof rung);
  }
  return readable();
}

bool TcpPrefix::feeder_gone() const noexcept {
  Shared* s = shared_.load(std::memory_order_acquire);
  if (s == nullptr || !s->relay || s->feeder <= 0) return false;
  return kill(s->feeder, 0) != 0 && errno == ESRCH;
}

int TcpPrefix::feed_space(iovec out[2], size_t window) {
  Shared* s = shared_.load(std::memory_order_acquire);
  if (s == nullptr || !s->relay) return 0;
  uint64_t begin, end;
  {
    RobustLock lock(&s->mutex);
    s->check(mapped_);
    if (!s->fed) return 0;
    begin = s->begin;
    end = s->end;
  }
  uint64_t queued = end - begin;
  uint64_t limit = std::min<uint64_t>(window, s->capacity);
  if (queued >= limit) return 0;
  // Only the feeder moves `end`; readers only move `begin` forward, which makes more room, never less.
  size_t free = static_cast<size_t>(limit - queued);
  size_t offset = static_cast<size_t>(end % s->capacity);
  size_t first = std::min<size_t>(free, s->capacity - offset);
  out[0] = {s->bytes() + offset, first};
  if (first == free) return 1;
  out[1] = {s->bytes(), free - first};
  return 2;
}

void TcpPrefix::commit(size_t n) {
  Shared* s = shared_.load(std::memory_order_acquire);
  if (s == nullptr || n == 0) return;
  {
    RobustLock lock(&s->mutex);
    s->check(mapped_);
    s->end += n;
    s->update_present();
  }
  ring_bell();
}

void TcpPrefix::finish(Then then, int error) {
  Shared* s = shared_.load(std::memory_order_acquire);
  if (s == nullptr) return;
  {
    RobustLock lock(&s->mutex);
    s->check(mapped_);
    if (!s->fed) return;
    s->fed = false;
    s->then = then;
    s->error = error;
    s->update_present();
  }
  ring_bell();
}

bool TcpPrefix::append_and_finish(const std::vector<uint8_t>& bytes, bool then_end) {
  std::lock_guard feeding(feed_mutex_);  // after the relay's last commit
  Shared* s = shared_.load(std::memory_order_acquire);
  {
    RobustLock lock(&s->mutex);
    s->check(mapped_);
    if (!s->fed || bytes.size() > s->capacity - (s->end - s->begin)) return false;
    s->copy_in(bytes.data(), bytes.size());
    s->fed = false;
    s->then = then_end ? Then::kEnd : Then::kKernel;
    s->update_present();
  }
  ring_bell();
  return true;
}

void TcpPrefix::wait_room(size_t window, int timeout_ms) {
  Shared* s = shared_.load(std::memory_order_acquire);
  if (s == nullptr) return;
  // Dekker's order with note_taken (taken, then feeder_waits): either the take sees us waiting and
  // wakes us, or we see its count and do not sleep.
  uint32_t seen = s->taken.load(std::memory_order_seq_cst);
  s->feeder_waits.store(1, std::memory_order_seq_cst);
  bool room;
  {
    RobustLock lock(&s->mutex);
    s->check(mapped_);
    room = !s->fed || s->end - s->begin < std::min<uint64_t>(window, s->capacity);
  }
  if (!room) {
    timespec t{timeout_ms / 1000, static_cast<long>(timeout_ms % 1000) * 1000000L};
    syscall(SYS_futex, &s->taken, FUTEX_WAIT, seen, &t, nullptr, 0);  // at once if a take came meanwhile
  }
  s->feeder_waits.store(0, std::memory_order_seq_cst);
}

void TcpPrefix::wake_feeder() {
  if (Shared* s = shared_.load(std::memory_order_acquire)) s->note_taken();
}

}  // namespace tcp2rdma::preload
