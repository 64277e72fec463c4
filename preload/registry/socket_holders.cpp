#include "registry/socket_holders.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <vector>

#include "libc/real_calls.h"
#include "registry/fork_share.h"

namespace tcp2rdma::preload {
namespace {

// The lock of socket_holders' scan and its result, in storage that is never destroyed (a thread may
// ask while the process exits). A forked child makes it anew in place (socket_holders_after_fork): a
// thread of the parent may have held it at the fork. In place, not a new allocation: the child's
// copy of the old one would be a leak for LeakSanitizer.
alignas(std::mutex) unsigned char scan_lock_storage[sizeof(std::mutex)];

std::mutex& scan_lock() {
  static std::mutex* lock = new (scan_lock_storage) std::mutex;
  return *lock;
}

bool all_digits(const char* name) {
  if (*name == '\0') return false;
  for (const char* c = name; *c != '\0'; ++c) {
    if (*c < '0' || *c > '9') return false;
  }
  return true;
}

// The parent of `pid` from its stat line (readable for every process), or 0.
pid_t parent_of(int proc_fd, pid_t pid) {
  char path[32];
  std::snprintf(path, sizeof path, "%d/stat", static_cast<int>(pid));
  int fd = openat(proc_fd, path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char line[512];
  ssize_t n = real().read(fd, line, sizeof line - 1);
  real().close(fd);
  if (n <= 0) return 0;
  line[n] = '\0';
  // "pid (comm) state ppid ...": comm may hold spaces and parentheses; the last ')' ends it.
  const char* end = std::strrchr(line, ')');
  int ppid = 0;
  char state = 0;
  if (end == nullptr || std::sscanf(end + 1, " %c %d", &state, &ppid) != 2) return 0;
  return static_cast<pid_t>(ppid);
}

// The ancestors of `pid` below init, nearest first (a few steps of parent links). Init is everyone's
// ancestor and an unprivileged process cannot look at it: counted, it would keep every connection
// shared for good (a service manager that hands a process its connection keeps no copy of it).
std::vector<pid_t> ancestors_of(int proc_fd, pid_t pid) {
  std::vector<pid_t> chain;
  for (int step = 0; step < 64; ++step) {
    pid = parent_of(proc_fd, pid);
    if (pid <= 1) break;
    chain.push_back(pid);
  }
  return chain;
}

// The socket inodes process `pid`'s descriptors name, added to *inodes; false when they cannot be read.
bool add_sockets_of(int proc_fd, pid_t pid, std::vector<ino_t>* inodes) {
  char path[32];
  std::snprintf(path, sizeof path, "%d/fd", static_cast<int>(pid));
  int dir_fd = openat(proc_fd, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) return errno == ENOENT;  // gone meanwhile: it holds nothing
  DIR* dir = fdopendir(dir_fd);
  if (dir == nullptr) {
    real().close(dir_fd);
    return false;
  }
  char target[64];
  while (dirent* e = readdir(dir)) {
    if (!all_digits(e->d_name)) continue;
    ssize_t n = readlinkat(dir_fd, e->d_name, target, sizeof target - 1);
    if (n <= 0) continue;
    target[n] = '\0';
    unsigned long long inode = 0;
    if (std::sscanf(target, "socket:[%llu]", &inode) == 1) {
      try {
        inodes->push_back(static_cast<ino_t>(inode));
      } catch (...) {
        closedir(dir);
        return false;
      }
    }
  }
  closedir(dir);
  return true;
}

}  // namespace

Holders HeldSockets::of(ino_t inode, pid_t creator, pid_t self) const noexcept {
  if (std::binary_search(inodes.begin(), inodes.end(), inode)) return Holders::kOthers;
  if (unknown_descendant) return Holders::kUnknown;
  if (hidden_ancestors.empty() || creator == 0 || creator == self) return Holders::kThisProcessOnly;
  // The ancestors that may hold it: those from our parent up to the creator.
  auto made_by = std::find(ancestors.begin(), ancestors.end(), creator);
  auto may_hold_end = made_by == ancestors.end() ? ancestors.end() : made_by + 1;
  for (pid_t hidden : hidden_ancestors) {
    if (made_by == ancestors.end() || std::find(ancestors.begin(), may_hold_end, hidden) != may_hold_end) {
      return Holders::kUnknown;
    }
  }
  return Holders::kThisProcessOnly;
}

bool scan_held_sockets(const char* proc, pid_t self, HeldSockets* out) noexcept {
  out->inodes.clear();
  out->unknown_descendant = false;
  out->ancestors.clear();
  out->hidden_ancestors.clear();
  int proc_fd = open(proc, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (proc_fd < 0) return false;
  int listing = real().dup(proc_fd);
  DIR* dir = listing >= 0 ? fdopendir(listing) : nullptr;
  if (dir == nullptr) {
    if (listing >= 0) real().close(listing);
    real().close(proc_fd);
    return false;
  }
  bool ours_read = false;  // this process's ancestors, read once: at the first unreadable process
  while (dirent* e = readdir(dir)) {
    if (!all_digits(e->d_name)) continue;
    pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid == self || add_sockets_of(proc_fd, pid, &out->inodes)) continue;
    // A process we may not look at holds our socket only if it came from us or we from it (a child
    // that changed its credentials, a parent of another user's); any other could only have been
    // sent it, which a passed connection's mark covers (ForkShare::note_passed).
    if (!ours_read) {
      out->ancestors = ancestors_of(proc_fd, self);
      ours_read = true;
    }
    try {
      if (std::find(out->ancestors.begin(), out->ancestors.end(), pid) != out->ancestors.end()) {
        out->hidden_ancestors.push_back(pid);
        continue;
      }
    } catch (const std::bad_alloc&) {
      out->unknown_descendant = true;  // as cautious as can be
    }
    if (out->unknown_descendant) continue;
    std::vector<pid_t> theirs = ancestors_of(proc_fd, pid);
    out->unknown_descendant = std::find(theirs.begin(), theirs.end(), self) != theirs.end();
  }
  closedir(dir);
  real().close(proc_fd);
  std::sort(out->inodes.begin(), out->inodes.end());
  return true;
}

void socket_holders_after_fork() noexcept {
  new (&scan_lock()) std::mutex;  // std::mutex needs no destruction: the held one is simply replaced
}

Holders socket_holders(int fd, pid_t creator) noexcept {
  int saved = errno;
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) {
    errno = saved;
    return Holders::kUnknown;
  }
  // One scan a second serves every connection that asks: a socket asked about is one of this
  // process's, shared before the scan, so a scan a moment old still lists every other holder it had
  // then; one that let go since is seen at the next attempt.
  static auto* held = new HeldSockets;  // never freed: a thread may ask while the process exits
  static std::chrono::steady_clock::time_point taken{};
  static pid_t taken_by = 0;        // a forked child's copy is its parent's view: looked at again
  static uint64_t taken_at_forks = 0;  // a fork since: the child holds what we do
  static bool valid = false;
  std::lock_guard lock(scan_lock());
  auto now = std::chrono::steady_clock::now();
  pid_t self = getpid();
  if (!valid || now - taken > std::chrono::seconds(1) || taken_by != self || taken_at_forks != forks_so_far()) {
    taken_at_forks = forks_so_far();
    valid = scan_held_sockets("/proc", self, held);
    taken = now;
    taken_by = self;
  }
  Holders verdict = valid ? held->of(st.st_ino, creator, self) : Holders::kUnknown;
  errno = saved;
  return verdict;
}

}  // namespace tcp2rdma::preload
