#include "listener/listener_directory.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>

#include "libc/real_calls.h"
#include "own_descriptors.h"
#include "util/robust_mutex.h"

namespace tcp2rdma::preload {

bool process_alive(pid_t pid) noexcept {
  if (pid <= 0 || (::kill(pid, 0) != 0 && errno != EPERM)) return false;
  // A worker that exited stays a zombie until its parent reaps it, which a server may do late: its
  // state in /proc/PID/stat (after the parenthesised name) says so.
  char path[32], stat[512];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return true;  // no /proc: trust kill()
  ssize_t n = real().read(fd, stat, sizeof stat - 1);
  real().close(fd);
  if (n <= 0) return true;
  stat[n] = '\0';
  const char* end_of_name = std::strrchr(stat, ')');
  return end_of_name == nullptr || end_of_name[1] != ' ' || (end_of_name[2] != 'Z' && end_of_name[2] != 'X');
}

// The directory's mutex is robust (robust_mutex.h): a process that died holding it left the table as
// it was between two stores of one small update, and every reader copes with that (an entry is whole
// once its pid is set).
using Locked = RobustLock;

namespace {

// Room for a directory: the shared mapping of a new memfd (*memfd, above the application's
// descriptors), or of anonymous memory (*memfd -1) when no memfd can be had.
void* shared_memory(int* memfd) noexcept {
  {
    transport::OwnDescriptors window;  // not a number of the application's
    *memfd = window.place(static_cast<int>(::memfd_create("tcp2rdma-directory", MFD_CLOEXEC)));
  }
  if (*memfd >= 0) {
    void* p = ::ftruncate(*memfd, sizeof(ListenerDirectory)) == 0
                  ? ::mmap(nullptr, sizeof(ListenerDirectory), PROT_READ | PROT_WRITE, MAP_SHARED, *memfd, 0)
                  : MAP_FAILED;
    if (p != MAP_FAILED) return p;
    real().close(*memfd);
    *memfd = -1;
  }
  return ::mmap(nullptr, sizeof(ListenerDirectory), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
}

}  // namespace

ListenerDirectory* ListenerDirectory::create(int* memfd) noexcept {
  void* p = shared_memory(memfd);
  if (p == MAP_FAILED) return nullptr;
  auto* d = static_cast<ListenerDirectory*>(p);  // the mapping is zeroed: no holder, every entry free
  if (init_robust_mutex(&d->mutex_) != 0) {
    ::munmap(p, sizeof(ListenerDirectory));
    if (*memfd >= 0) real().close(*memfd);
    *memfd = -1;
    return nullptr;
  }
  return d;
}

ListenerDirectory* ListenerDirectory::map(int memfd) noexcept {
  struct stat st {};
  if (::fstat(memfd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size != sizeof(ListenerDirectory)) return nullptr;
  void* p = ::mmap(nullptr, sizeof(ListenerDirectory), PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
  return p == MAP_FAILED ? nullptr : static_cast<ListenerDirectory*>(p);
}

void ListenerDirectory::unmap(ListenerDirectory* directory) noexcept {
  if (directory != nullptr) ::munmap(directory, sizeof(ListenerDirectory));
}

bool ListenerDirectory::claim_holder(pid_t self) noexcept {
  Locked lock(&mutex_);
  if (holder_ != 0 && holder_ != self && process_alive(holder_)) return false;
  holder_ = self;
  return true;
}

void ListenerDirectory::release_holder(pid_t self) noexcept {
  Locked lock(&mutex_);
  if (holder_ == self) holder_ = 0;
}

pid_t ListenerDirectory::holder() noexcept {
  Locked lock(&mutex_);
  return holder_;
}

bool ListenerDirectory::publish(const transport::TcpTuple& tuple, uint16_t port, pid_t self) noexcept {
  Locked lock(&mutex_);
  Entry* free_entry = nullptr;
  for (Entry& e : entries_) {
    if (e.pid == 0 && free_entry == nullptr) free_entry = &e;
  }
  if (free_entry == nullptr) {
    // Full: entries of processes that died before withdrawing them are taken back.
    for (Entry& e : entries_) {
      if (!process_alive(e.pid)) {
        e.pid = 0;
        if (free_entry == nullptr) free_entry = &e;
      }
    }
  }
  if (free_entry == nullptr) return false;
  free_entry->tuple = tuple;
  free_entry->port = port;
  free_entry->pid = self;
  return true;
}

void ListenerDirectory::withdraw(const transport::TcpTuple& tuple, pid_t self) noexcept {
  Locked lock(&mutex_);
  for (Entry& e : entries_) {
    if (e.pid == self && std::memcmp(&e.tuple, &tuple, sizeof tuple) == 0) e.pid = 0;
  }
}

uint16_t ListenerDirectory::port_for(const transport::TcpTuple& tuple) noexcept {
  Locked lock(&mutex_);
  for (const Entry& e : entries_) {
    if (e.pid != 0 && std::memcmp(&e.tuple, &tuple, sizeof tuple) == 0) return e.port;
  }
  return 0;
}

}  // namespace tcp2rdma::preload
