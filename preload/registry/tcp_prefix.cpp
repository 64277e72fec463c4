#include "registry/tcp_prefix.h"

#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>

#include "libc/real_calls.h"
#include "own_descriptors.h"
#include "util/robust_mutex.h"

namespace tcp2rdma::preload {

// The mapping: this header, then the bytes (bytes()). Its members are touched only with `mutex`
// held, except `present`, which says without the lock whether anything is left to report.
struct TcpPrefix::Shared {
  pthread_mutex_t mutex;  // process-shared, robust: a reader that died holding it does not stop the others
  std::atomic<bool> present;
  bool then_end;
  size_t size;
  size_t pos;
  uint8_t* bytes() { return reinterpret_cast<uint8_t*>(this + 1); }
};

TcpPrefix::~TcpPrefix() {
  if (Shared* s = shared_.load(std::memory_order_acquire)) munmap(s, mapped_);
}

bool TcpPrefix::publish(void* memory, size_t length, const std::vector<uint8_t>& bytes, bool then_end) {
  auto* s = static_cast<Shared*>(memory);
  if (init_robust_mutex(&s->mutex) != 0) {
    munmap(memory, length);
    return false;
  }
  s->then_end = then_end;
  s->size = bytes.size();
  s->pos = 0;
  if (!bytes.empty()) std::memcpy(s->bytes(), bytes.data(), bytes.size());
  s->present.store(then_end || !bytes.empty(), std::memory_order_release);
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
  if (!replaceable()) return false;
  size_t length = sizeof(Shared) + bytes.size();
  void* memory = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) return false;
  memfd_.store(nullptr);  // an earlier shared queue is not this one
  return publish(memory, length, bytes, then_end);
}

bool TcpPrefix::set_shared(const std::vector<uint8_t>& bytes, bool then_end) {
  if (!replaceable()) return false;
  size_t length = sizeof(Shared) + bytes.size();
  int memfd = -1;
  {
    transport::OwnDescriptors window;  // not a number of the application's
    memfd = window.place(static_cast<int>(memfd_create("tcp2rdma-prefix", MFD_CLOEXEC)));
  }
  if (memfd < 0) return false;
  std::shared_ptr<const int> held;
  try {
    held = hold_memfd(memfd);
  } catch (const std::bad_alloc&) {
    real().close(memfd);
    return false;
  }
  void* memory = ftruncate(memfd, static_cast<off_t>(length)) == 0
                     ? mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0)
                     : MAP_FAILED;
  if (memory == MAP_FAILED) return false;
  memfd_.store(std::move(held));  // before the mapping is published: shareable() finds them together
  if (publish(memory, length, bytes, then_end)) return true;
  memfd_.store(nullptr);
  return false;
}

bool TcpPrefix::adopt(const std::shared_ptr<const int>& held) {
  if (!replaceable() || !held) return false;
  struct stat st {};
  if (fstat(*held, &st) != 0 || st.st_size < static_cast<off_t>(sizeof(Shared))) return false;
  size_t length = static_cast<size_t>(st.st_size);
  void* memory = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, *held, 0);
  if (memory == MAP_FAILED) return false;
  auto* s = static_cast<Shared*>(memory);
  // Made by this module in the process that forked us; its size is checked all the same.
  if (s->size > length - sizeof(Shared)) {
    munmap(memory, length);
    return false;
  }
  memfd_.store(held);
  mapped_ = length;
  shared_.store(s, std::memory_order_release);
  return true;
}

std::shared_ptr<const int> TcpPrefix::shareable() const noexcept {
  return shared_.load(std::memory_order_acquire) != nullptr ? memfd_.load() : nullptr;
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
  RobustLock lock(&s->mutex);
  size_t copied = 0;
  for (int i = 0; i < iovcnt && s->pos + copied < s->size; ++i) {
    size_t n = std::min(iov[i].iov_len, s->size - s->pos - copied);
    std::memcpy(iov[i].iov_base, s->bytes() + s->pos + copied, n);
    copied += n;
  }
  if (!peek) s->pos += copied;
  if (s->pos == s->size) {
    s->present.store(s->then_end, std::memory_order_release);
    *at_end = s->then_end;
  }
  return copied;
}

bool TcpPrefix::take_all(std::vector<uint8_t>* bytes) {
  bytes->clear();
  Shared* s = shared_.load(std::memory_order_acquire);
  if (s == nullptr) return true;
  RobustLock lock(&s->mutex);
  try {
    bytes->assign(s->bytes() + s->pos, s->bytes() + s->size);
  } catch (const std::bad_alloc&) {
    return false;
  }
  s->pos = s->size;
  s->present.store(s->then_end, std::memory_order_release);
  return true;
}

size_t TcpPrefix::size() const {
  Shared* s = shared_.load(std::memory_order_acquire);
  if (s == nullptr) return 0;
  RobustLock lock(&s->mutex);
  return s->size - s->pos;
}

bool TcpPrefix::then_end() const {
  Shared* s = shared_.load(std::memory_order_acquire);
  return s != nullptr && s->then_end;  // set once, before the mapping is published
}

}  // namespace tcp2rdma::preload
