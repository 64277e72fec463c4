#include "page_frames.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>

namespace tcp2rdma::transport {
namespace {

constexpr uint64_t kPresent = uint64_t{1} << 63;
constexpr uint64_t kFrameMask = (uint64_t{1} << 55) - 1;

// One descriptor per process, opened on first use and kept: a zero-copy write must not pay an open().
int pagemap_fd() {
  static std::atomic<int> fd{-2};
  int current = fd.load(std::memory_order_acquire);
  if (current != -2) return current;
  int opened = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  int expected = -2;
  if (!fd.compare_exchange_strong(expected, opened)) {
    if (opened >= 0) ::close(opened);
    return expected;
  }
  return opened;
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
