#include "registry/tcp_prefix.h"

#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>

#include "libc/real_calls.h"
#include "own_descriptors.h"
#include "registry/tcp_prefix_shared.h"
#include "util/robust_mutex.h"

namespace tcp2rdma::preload {

TcpPrefix::~TcpPrefix() {
  if (Shared* s = shared_.load(std::memory_order_acquire)) munmap(s, mapped_);
}

bool TcpPrefix::publish(void* memory, size_t length, const std::vector<uint8_t>& bytes, bool then_end) {
  auto* s = static_cast<Shared*>(memory);
  if (init_robust_mutex(&s->mutex) != 0) {
    munmap(memory, length);
    return false;
  }
  s->then = then_end ? Then::kEnd : Then::kKernel;
  s->capacity = length - sizeof(Shared);
  s->begin = 0;
  s->end = bytes.size();
  if (!bytes.empty()) std::memcpy(s->bytes(), bytes.data(), bytes.size());
  s->update_present();
  mapped_ = length;
  shared_.store(s, std::memory_order_release);
  return true;
}

bool TcpPrefix::replaceable() const noexcept {
  // A connection that went back to RDMA and moves back again finds its last prefix read to the end.
  // That mapping stays (a reader that loaded it may still look at it): a few pages per move back.
  Shared* s = shared_.load(std::memory_order_acquire);
  return s == nullptr || !s->present.load(std::memory_order_acquire);
}

bool TcpPrefix::set(const std::vector<uint8_t>& bytes, bool then_end) {
  if (fed()) return append_and_finish(bytes, then_end);
  if (!replaceable()) return false;
  size_t length = sizeof(Shared) + bytes.size();
  void* memory = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) return false;
  memfd_.store(nullptr);  // an earlier shared queue is not this one
  wake_.store(nullptr);
  return publish(memory, length, bytes, then_end);
}

bool TcpPrefix::map_memfd(size_t capacity, const char* name, void** memory, size_t* length) {
  *length = sizeof(Shared) + capacity;
  int memfd = -1;
  {
    transport::OwnDescriptors window;  // not a number of the application's
    memfd = window.place(static_cast<int>(memfd_create(name, MFD_CLOEXEC)));
  }
  if (memfd < 0) return false;
  std::shared_ptr<const int> held;
  try {
    held = hold_memfd(memfd);
  } catch (const std::bad_alloc&) {
    real().close(memfd);
    return false;
  }
  *memory = ftruncate(memfd, static_cast<off_t>(*length)) == 0
                ? mmap(nullptr, *length, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0)
                : MAP_FAILED;
  if (*memory == MAP_FAILED) return false;
  memfd_.store(std::move(held));  // before the mapping is published: shareable() finds them together
  return true;
}

bool TcpPrefix::set_shared(const std::vector<uint8_t>& bytes, bool then_end) {
  if (fed()) return append_and_finish(bytes, then_end);
  if (!replaceable()) return false;
  void* memory = nullptr;
  size_t length = 0;
  if (!map_memfd(bytes.size(), "tcp2rdma-prefix", &memory, &length)) return false;
  wake_.store(nullptr);
  if (publish(memory, length, bytes, then_end)) return true;
  memfd_.store(nullptr);
  return false;
}

bool TcpPrefix::adopt_mapping(const std::shared_ptr<const int>& held) {
  if (!replaceable() || !held) return false;
  struct stat st {};
  if (fstat(*held, &st) != 0 || st.st_size < static_cast<off_t>(sizeof(Shared))) return false;
  size_t length = static_cast<size_t>(st.st_size);
  void* memory = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, *held, 0);
  if (memory == MAP_FAILED) return false;
  auto* s = static_cast<Shared*>(memory);
  // Made by this module in the process that forked us; its sizes are checked all the same.
  if (!s->consistent(length)) {
    munmap(memory, length);
    return false;
  }
  memfd_.store(held);
  mapped_ = length;
  shared_.store(s, std::memory_order_release);
  return true;
}

bool TcpPrefix::adopt(const std::shared_ptr<const int>& held) {
  wake_.store(nullptr);
  return adopt_mapping(held);
}

std::shared_ptr<const int> TcpPrefix::shareable() const noexcept {
  return shared_.load(std::memory_order_acquire) != nullptr ? memfd_.load() : nullptr;
}

bool TcpPrefix::maps(const std::shared_ptr<const int>& held) const noexcept {
  std::shared_ptr<const int> ours = shareable();
  if (!ours || !held) return false;
  struct stat a {}, b {};
  return fstat(*ours, &a) == 0 && fstat(*held, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

std::shared_ptr<const int> hold_memfd(int fd) {
  return std::shared_ptr<const int>(new int(fd), [](const int* held) {
    real().close(*held);
    delete held;
  });
}

bool TcpPrefix::present() const noexcept {
  Shared* s = shared_.load(std::memory_order_acquire);
  return s != nullptr && s->present.load(std::memory_order_acquire);
}

size_t TcpPrefix::take(const iovec* iov, int iovcnt, bool peek, bool* at_end) {
  *at_end = false;
  Shared* s = shared_.load(std::memory_order_acquire);
  if (s == nullptr) return 0;
  size_t copied = 0;
  {
    RobustLock lock(&s->mutex);
    s->check(mapped_);
    for (int i = 0; i < iovcnt && s->begin + copied < s->end; ++i) {
      copied += s->copy_out(s->begin + copied, static_cast<uint8_t*>(iov[i].iov_base),
                            std::min<uint64_t>(iov[i].iov_len, s->end - s->begin - copied));
    }
    if (!peek && copied > 0) {
      s->begin += copied;
      s->note_taken();
    }
    s->update_present();
    *at_end = s->begin == s->end && !s->fed && s->then == Then::kEnd;
  }
  // No ring for the bytes left: the bell is emptied only by a reader that found the queue empty
  // (readable_or_arm), so it still stands for them, and every waiter it woke looks again.
  return copied;
}

int TcpPrefix::take_error() {
  Shared* s = shared_.load(std::memory_order_acquire);
  if (s == nullptr) return 0;
  RobustLock lock(&s->mutex);
  s->check(mapped_);
  if (s->begin != s->end || s->fed || s->then != Then::kError) return 0;
  s->then = Then::kEnd;
  return s->error;
}

bool TcpPrefix::take_all(std::vector<uint8_t>* bytes) {
  bytes->clear();
  Shared* s = shared_.load(std::memory_order_acquire);
  if (s == nullptr) return true;
  RobustLock lock(&s->mutex);
  s->check(mapped_);
  try {
    bytes->resize(s->end - s->begin);
  } catch (const std::bad_alloc&) {
    return false;
  }
  s->copy_out(s->begin, bytes->data(), bytes->size());
  s->begin = s->end;
  s->note_taken();
  s->update_present();
  return true;
}

size_t TcpPrefix::size() const {
  Shared* s = shared_.load(std::memory_order_acquire);
  if (s == nullptr) return 0;
  RobustLock lock(&s->mutex);
  s->check(mapped_);
  return s->end - s->begin;
}

bool TcpPrefix::then_end() const {
  Shared* s = shared_.load(std::memory_order_acquire);
  if (s == nullptr) return false;
  RobustLock lock(&s->mutex);
  s->check(mapped_);
  return s->then == Then::kEnd;
}

}  // namespace tcp2rdma::preload
