#include "page_frames.h"

#include "own_descriptors.h"

#include <fcntl.h>
#include <unistd.h>

#include <mutex>

namespace tcp2rdma::transport {
namespace {

constexpr uint64_t kPresent = uint64_t{1} << 63;
constexpr uint64_t kFrameMask = (uint64_t{1} << 55) - 1;

// One descriptor per process, opened on first use and kept: a zero-copy write must not pay an open().
// "self" is resolved when it is opened: a forked child that used its parent's descriptor would read the
// parent's frames and "prove" a registration of pages it no longer shares (copy-on-write), so the
// descriptor is the opening process's only (a getpid() per lookup, beside a registration or a send).
int pagemap_fd() {
  static std::mutex mutex;
  static int fd = -1;
  static pid_t owner = 0;
  pid_t self = getpid();
  std::lock_guard lock(mutex);
  if (owner == self) return fd;
  // The parent's descriptor in a child is left open, not closed: the module's descriptors are all
  // close-on-exec, and this one is a few bytes of kernel state.
  OwnDescriptors window;  // kept for the process's life: above the application's limit
  fd = window.place(::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC));
  owner = self;
  return fd;
}

}  // namespace

bool read_page_frames(uintptr_t first_page, size_t pages, std::vector<uint64_t>* frames) {
  int fd = pagemap_fd();
  if (fd < 0) return false;
  frames->resize(pages);
  size_t bytes = pages * sizeof(uint64_t);
  off_t offset = static_cast<off_t>(first_page / kPageSize * sizeof(uint64_t));
  if (::pread(fd, frames->data(), bytes, offset) != static_cast<ssize_t>(bytes)) return false;
  bool any_frame = false;
  for (uint64_t& entry : *frames) {
    entry = (entry & kPresent) ? (entry & kFrameMask) : 0;
    any_frame = any_frame || entry != 0;
  }
  return any_frame;
}

}  // namespace tcp2rdma::transport
