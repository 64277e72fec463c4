#include "own_descriptors.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

#include "keep_forever.h"
#include "os_calls.h"

namespace tcp2rdma::transport {
namespace {

// The room asked for above the application's limit; doubled while the module's descriptors fill it.
constexpr unsigned long kRoom = 4096;

// Made on first use (the module's constructors may log before this file's statics are set up), and
// anew in a forked child (own_descriptors_after_fork).
std::mutex*& mutex_slot() {
  // The first lock is a static object, constant-initialized: no allocation, so that an application's
  // getrlimit before any initializer of the process ran (a sanitizer runtime's own start) may take it.
  static constinit std::mutex first;
  static constinit std::mutex* mutex = &first;
  return mutex;
}

// Through the OS-call table, past the module's fcntl()/close() wrappers, which have nothing to say
// about the module's own descriptors. The table's close is the next one after the module: libc's, or
// ThreadSanitizer's interceptor in a TSan build, which must see it: TSan tracks a descriptor from the
// call that made it to its close, and a close it did not see makes the kernel's next use of the
// number (another thread's open()) look like an unsynchronised write.
int dup_at_least(int fd, unsigned long floor) { return os().fcntl(fd, F_DUPFD_CLOEXEC, floor); }

// The placements at the top of the application's range, with the window's lock: each number with the
// file it held then, so that one closed since (its number free, or the application's now) is told
// apart from one still the module's.
struct AtTop {
  int fd;
  dev_t dev;
  ino_t ino;
};
std::vector<AtTop>& at_top() {
  static auto* placements = new std::vector<AtTop>;  // never destroyed: windows may open at exit
  return *placements;
}
std::atomic<size_t> g_at_top_count{0};  // at_top().size(), read without the lock

bool same_file(const AtTop& p) {
  struct stat now {};
  return fstat(p.fd, &now) == 0 && now.st_dev == p.dev && now.st_ino == p.ino;
}
void close_raw(int fd) { os().close(fd); }

// Sets the soft limit to floor + room, or as far as the hard limit goes (root may raise the hard limit
// too). The new soft limit, or 0 when nothing lies above the floor.
unsigned long raise_limit(unsigned long floor, unsigned long room) {
  rlimit now{};
  if (os().getrlimit(RLIMIT_NOFILE, &now) != 0) return 0;
  rlimit want{floor + room, std::max<rlim_t>(now.rlim_max, floor + room)};
  if (os().setrlimit(RLIMIT_NOFILE, &want) == 0) return want.rlim_cur;
  rlimit within{std::min<rlim_t>(floor + room, now.rlim_max), now.rlim_max};
  if (within.rlim_cur <= floor || os().setrlimit(RLIMIT_NOFILE, &within) != 0) return 0;
  return within.rlim_cur;
}

}  // namespace

OwnDescriptors::OwnDescriptors() noexcept {
  mutex_slot()->lock();
  rlimit now{};
  if (os().getrlimit(RLIMIT_NOFILE, &now) != 0) return;
  floor_ = now.rlim_cur;
  hard_ = now.rlim_max;
  raised_ = raise_limit(floor_, kRoom);
}

OwnDescriptors::~OwnDescriptors() {
  if (raised_ != 0) {
    rlimit now{};
    if (os().getrlimit(RLIMIT_NOFILE, &now) == 0 && now.rlim_cur == raised_) {
      rlimit theirs{floor_, hard_};  // both as the application had them (root's hard one may have risen)
      os().setrlimit(RLIMIT_NOFILE, &theirs);
    }
  }
  mutex_slot()->unlock();
}

int OwnDescriptors::move_up(int fd) noexcept {
  while (raised_ != 0) {
    int high = dup_at_least(fd, floor_);
    if (high >= 0) return high;
    if (errno != EMFILE && errno != EINVAL) break;
    unsigned long more = raise_limit(floor_, 2 * (raised_ - floor_));  // full: twice the room
    if (more <= raised_) break;
    raised_ = more;
  }
  if (raised_ == 0) return move_to_top(fd);
  errno = EMFILE;
  return -1;
}

unsigned long OwnDescriptors::top_reserve(unsigned long limit) noexcept {
  return std::min<unsigned long>(kTopReserve, limit / 8);
}

int OwnDescriptors::move_to_top(int fd) noexcept {
  // F_DUPFD from floor - k gives the lowest free number from there: below the limit only if one is
  // free there, so the first k that succeeds gives the highest free number of the reserve.
  unsigned long reserve = top_reserve(floor_);
  for (unsigned long k = 1; k <= reserve; ++k) {
    int top = dup_at_least(fd, floor_ - k);
    if (top >= 0) {
      struct stat file {};
      if (fstat(top, &file) == 0) {
        try {
          at_top().push_back({top, file.st_dev, file.st_ino});
          g_at_top_count.store(at_top().size(), std::memory_order_relaxed);
        } catch (const std::bad_alloc&) {
          // Not counted: the gauge is short by one.
        }
      }
      return top;
    }
    if (errno != EMFILE) break;
  }
  errno = EMFILE;
  return -1;
}

int OwnDescriptors::place(int fd) noexcept {
  if (fd < 0) return fd;
  int high = move_up(fd);
  close_raw(fd);
  if (high < 0) errno = EMFILE;
  return high;
}

int OwnDescriptors::place_if_room(int fd) noexcept {
  if (fd < 0) return fd;
  int high = move_up(fd);
  if (high < 0) return fd;
  close_raw(fd);
  return high;
}

std::unique_lock<std::mutex> hold_descriptor_limit() noexcept { return std::unique_lock(*mutex_slot()); }

size_t own_descriptors_at_top() noexcept {
  if (g_at_top_count.load(std::memory_order_relaxed) == 0) return 0;
  std::lock_guard lock(*mutex_slot());
  std::erase_if(at_top(), [](const AtTop& p) { return !same_file(p); });
  g_at_top_count.store(at_top().size(), std::memory_order_relaxed);
  return at_top().size();
}

void own_descriptors_after_fork() noexcept { keep_forever(std::exchange(mutex_slot(), new std::mutex)); }

}  // namespace tcp2rdma::transport
