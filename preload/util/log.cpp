#include "util/log.h"

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "libc/kept_descriptors.h"
#include "libc/real_calls.h"
#include "own_descriptors.h"
#include "util/saved_errno.h"

namespace tcp2rdma::preload {
namespace {

constexpr int kUnset = -2;
constexpr int kOff = -1;
std::atomic<int> g_log_fd{kUnset};

// Decided once, on first use. The file is opened with the raw syscall so that the descriptor is not
// mistaken for an application file by anything that watches open(); O_CLOEXEC keeps it out of exec'd
// programs, which open their own.
int log_fd() noexcept {
  int fd = g_log_fd.load(std::memory_order_acquire);
  if (fd != kUnset) [[likely]] return fd;
  const char* target = std::getenv("TCP2RDMA_LOG");
  if (target == nullptr || *target == '\0' || std::strcmp(target, "0") == 0) {
    fd = kOff;
  } else if (target[0] == '/') {
    // One of the module's own descriptors: above the application's limit (own_descriptors.h).
    transport::OwnDescriptors window;
    fd = window.place_if_room(static_cast<int>(syscall(SYS_openat, AT_FDCWD, target, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644)));
    if (fd < 0) fd = STDERR_FILENO;
  } else {
    fd = STDERR_FILENO;
  }
  int expected = kUnset;
  if (!g_log_fd.compare_exchange_strong(expected, fd) && fd > STDERR_FILENO) {
    syscall(SYS_close, fd);  // another thread decided first
    fd = expected;
  } else if (fd > STDERR_FILENO) {
    keep_from_application(fd);  // a child's close_range before its exec leaves the log open
  }
  return fd;
}

}  // namespace

bool log_enabled() noexcept { return log_fd() != kOff; }

namespace {

// TCP2RDMA_LOG_TIME=1 puts the wall-clock time (UTC, to the millisecond) after the pid: for reading
// two hosts' logs side by side (the order of one connection's lines at its two ends). Read once.
bool log_time() noexcept {
  static const bool on = [] {
    const char* v = std::getenv("TCP2RDMA_LOG_TIME");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  return on;
}

int write_prefix(char* line, size_t size) noexcept {
  int pid = static_cast<int>(getpid());
  if (!log_time()) return std::snprintf(line, size, "tcp2rdma[%d]: ", pid);
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  long day_ms = static_cast<long>(now.tv_sec % 86400) * 1000 + now.tv_nsec / 1000000;
  return std::snprintf(line, size, "tcp2rdma[%d] %02ld:%02ld:%02ld.%03ld: ", pid, day_ms / 3600000,
                       day_ms / 60000 % 60, day_ms / 1000 % 60, day_ms % 1000);
}

void write_line(int fd, const char* format, va_list ap) noexcept {
  SavedErrno keep_errno;
  char line[512];
  int n = write_prefix(line, sizeof line);
  int m = std::vsnprintf(line + n, sizeof line - static_cast<size_t>(n) - 1, format, ap);
  size_t len = static_cast<size_t>(n) + (m < 0 ? 0 : static_cast<size_t>(m));
  if (len > sizeof line - 2) len = sizeof line - 2;  // truncated: still one whole line
  line[len++] = '\n';
  // One write per line: with O_APPEND, lines of concurrent processes never interleave.
  ssize_t ignored = real().write(fd, line, len);
  (void)ignored;
}

}  // namespace

void log_line(const char* format, ...) noexcept {
  int fd = log_fd();
  if (fd == kOff) return;
  va_list ap;
  va_start(ap, format);
  write_line(fd, format, ap);
  va_end(ap);
}

void log_always(const char* format, ...) noexcept {
  int fd = log_fd();
  va_list ap;
  va_start(ap, format);
  write_line(fd == kOff ? STDERR_FILENO : fd, format, ap);
  va_end(ap);
}

}  // namespace tcp2rdma::preload
