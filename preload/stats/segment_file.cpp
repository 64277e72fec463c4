// The stats segment's file (segment_file.h).
#include "stats/segment_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "os_calls.h"
#include "stats/stats_writer.h"

namespace tcp2rdma::stats {
namespace {

// Reads a small /proc file into buf (NUL-terminated); false if it cannot.
bool read_small(const char* path, char* buf, size_t size) {
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  ssize_t n = ::pread(fd, buf, size - 1, 0);  // not read(): inside the module that is its own wrapper
  transport::os().close(fd);
  if (n <= 0) return false;
  buf[n] = '\0';
  return true;
}

// Field 22 of /proc/self/stat: after the command, which is in parentheses and may hold anything.
uint64_t start_time() {
  char text[1024];
  if (!read_small("/proc/self/stat", text, sizeof text)) return 0;
  const char* p = std::strrchr(text, ')');
  if (p == nullptr) return 0;
  for (int field = 2; field < 22 && p != nullptr; ++field) p = std::strchr(p + 1, ' ');
  return p != nullptr ? std::strtoull(p + 1, nullptr, 10) : 0;
}

void fill_header(Header* h) {
  h->version = kVersion;
  h->header_size = kHeaderSize;
  h->slot_size = kSlotSize;
  h->slot_count = kSlotCount;
  h->pid = static_cast<int32_t>(getpid());
  h->start_time = start_time();
  char comm[kProgramSize] = "";
  if (read_small("/proc/self/comm", comm, sizeof comm)) comm[std::strcspn(comm, "\n")] = '\0';
  std::memcpy(h->program, comm, sizeof comm);
  // The magic last: a reader that finds it finds the rest. (TSan rejects thread fences; its builds keep
  // the compiler barrier, and its readers are in other processes anyway.)
#if defined(__SANITIZE_THREAD__)
  std::atomic_signal_fence(std::memory_order_release);
#else
  std::atomic_thread_fence(std::memory_order_release);
#endif
  std::memcpy(h->magic, kMagic, sizeof kMagic);
}

// Removes the segments of this user's processes that are gone: a process killed by a signal, or ended
// by _exit, leaves its file behind, and tmpfs keeps its pages until someone removes it. Once per
// process, when its own segment is made; another user's files are theirs (the directory's sticky
// bit refuses their removal anyway). A pid that names a live process now is left alone, whether or not
// it is the one that made the file (tcp2rdma stat tells, by the start time).
void sweep_gone_segments() {
  DIR* dir = ::opendir(segment_directory());
  if (dir == nullptr) return;
  const uid_t me = ::geteuid();
  while (const dirent* entry = ::readdir(dir)) {
    constexpr char kPrefix[] = "tcp2rdma.";
    if (std::strncmp(entry->d_name, kPrefix, sizeof kPrefix - 1) != 0) continue;
    char* end = nullptr;
    long pid = std::strtol(entry->d_name + sizeof kPrefix - 1, &end, 10);
    if (end == nullptr || *end != '\0' || pid <= 0 || pid == ::getpid()) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    struct stat st {};
    if (::fstatat(::dirfd(dir), entry->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) && st.st_uid == me) {
      ::unlinkat(::dirfd(dir), entry->d_name, 0);
    }
  }
  ::closedir(dir);
}

}  // namespace

Header* make_segment(char* path, size_t path_size) {
  sweep_gone_segments();
  std::snprintf(path, path_size, "%s/tcp2rdma.%d", segment_directory(), static_cast<int>(getpid()));
  int fd = ::open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0 && errno == EEXIST) {
    // Left by a process that had this pid before (killed), or by this program before an exec.
    ::unlink(path);
    fd = ::open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  }
  if (fd < 0) return nullptr;
  void* at = MAP_FAILED;
  if (::ftruncate(fd, static_cast<off_t>(segment_size())) == 0) {
    at = ::mmap(nullptr, segment_size(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  transport::os().close(fd);
  if (at == MAP_FAILED) {
    ::unlink(path);
    return nullptr;
  }
  auto* h = static_cast<Header*>(at);
  fill_header(h);
  return h;
}

}  // namespace tcp2rdma::stats
