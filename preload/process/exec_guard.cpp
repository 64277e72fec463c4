#include "process/exec_guard.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "back_to_tcp/move_back.h"
#include "libc/real_calls.h"
#include "process/deferred_upgrade.h"
#include "process/fork_service.h"
#include "rdma_stream.h"
#include "registry/fd_table.h"
#include "registry/socket_registry.h"
#include "registry/stream_closer.h"
#include "registry/tracked_socket.h"
#include "registry/upgrade_session.h"
#include "util/log.h"
#include "util/saved_errno.h"

namespace tcp2rdma::preload {
namespace {

// Whether exec keeps some descriptor of `socket` open (one without FD_CLOEXEC).
bool survives_exec(const TrackedSocket* socket) noexcept {
  int end = fd_table().high_water();
  for (int fd = 0; fd < end; ++fd) {
    if (fd_table().find(fd) != socket) continue;
    int flags = real().fcntl(fd, F_GETFD);
    if (flags >= 0 && (flags & FD_CLOEXEC) == 0) return true;
  }
  return false;
}

// Connections our parent lent us that the new program keeps a descriptor of: claimed now (a child
// that closes them all before exec, as Python's subprocess does, costs its parent nothing).
void claim_inherited_that_survive() noexcept {
  for_each_tracked_fd([](int fd, SocketHold& socket) {
    if (socket->stream_of_parent() && survives_exec(socket.get())) claim_from_parent(socket.get(), fd);
  });
}

// Streams: back to TCP where a descriptor goes on and the rule allows it; ended (or, carried on,
// reset) where not.
void end_or_move_back_streams() noexcept {
  for_each_tracked_fd([](int fd, SocketHold& socket) {
    transport::RdmaStream* s = socket->stream();
    if (s == nullptr) return;
    if (!survives_exec(socket.get())) {
      // exec closes every descriptor of it: the last close, as close() does it.
      end_stream(s, socket->linger_seconds.load());
      return;
    }
    if (socket->follows_fork.load(std::memory_order_relaxed) && move_back(socket.get(), s, fd, "exec")) return;
    // Everything written so far still reaches the peer, then a reset: the new program's writes could
    // never arrive, and the peer must not read a clean end.
    (void)s->flush();
    s->abort();
    reset_and_disown(socket.get(), fd);
  });
}

// This module's file, as the loader opened it, or null.
const char* this_module_path() noexcept {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&adopt_exec_prefixes), &info) == 0 || info.dli_fname == nullptr) return nullptr;
  return info.dli_fname;
}

// Whether the program at `path` is loaded without the loader's secure mode, which ignores an
// LD_PRELOAD with a slash in it: no set-user-ID or set-group-ID bit, no file capabilities. (A
// security module may ask for secure mode too; none of Debian's does for an ordinary program.)
bool loads_preload_as_given(const char* path) noexcept {
  struct stat st{};
  if (path == nullptr || std::strchr(path, '/') == nullptr || stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return false;
  if ((st.st_mode & (S_ISUID | S_ISGID)) != 0) return false;
  SavedErrno keep_errno;
  if (getxattr(path, "security.capability", nullptr, 0) >= 0) return false;
  return errno == ENODATA || errno == ENOTSUP;
}

// Whether the environment `envp` preloads this module (the new program will then read the prefixes).
bool preloads_this_module(char* const* envp) noexcept {
  const char* path = this_module_path();
  if (path == nullptr) return false;
  const char* name = std::strrchr(path, '/');
  name = name != nullptr ? name + 1 : path;
  for (char* const* e = envp; e != nullptr && *e != nullptr; ++e) {
    if (std::strncmp(*e, "LD_PRELOAD=", 11) == 0 && std::strstr(*e + 11, name) != nullptr) return true;
  }
  return false;
}

// The prefix's bytes in a new memfd that exec keeps open, or -1.
int prefix_in_memfd(const TrackedSocket* socket) noexcept {
  int mfd = static_cast<int>(memfd_create("tcp2rdma-prefix", 0));
  if (mfd < 0) return -1;
  std::vector<uint8_t> bytes(socket->prefix.size());
  iovec whole{bytes.data(), bytes.size()};
  bool at_end = false;
  const_cast<TcpPrefix&>(socket->prefix).take(&whole, 1, /*peek=*/true, &at_end);
  for (size_t done = 0; done < bytes.size();) {
    ssize_t n = real().write(mfd, bytes.data() + done, bytes.size() - done);
    if (n <= 0) {
      real().close(mfd);
      return -1;
    }
    done += static_cast<size_t>(n);
  }
  return mfd;
}

// Every descriptor that exec keeps, of a socket with a prefix: handed on, or reset.
void hand_on_prefixes(PrefixHandOn* prefixes) noexcept {
  for_each_tracked_fd([&](int fd, SocketHold& socket) {
    if (!socket->prefix.present()) return;
    int flags = real().fcntl(fd, F_GETFD);
    if (flags < 0 || (flags & FD_CLOEXEC) != 0) return;
    if (!prefixes->add(socket.get(), fd)) {
      log_line("fd %d: reset at exec: %zu bytes of the peer's could not go with it", fd, socket->prefix.size());
      reset_and_disown(socket.get(), fd);
    }
  });
}

// Every descriptor that exec keeps, of a connection back on TCP with a return planned: the return is
// the new program's (exec_returns.h).
void hand_on_returns(ReturnHandOn* returns) noexcept {
  for_each_tracked_fd([&](int fd, SocketHold& socket) {
    int flags = real().fcntl(fd, F_GETFD);
    if (flags >= 0 && (flags & FD_CLOEXEC) == 0) (void)returns->add(socket.get(), fd);
  });
}

}  // namespace

void reset_and_disown(TrackedSocket* socket, int fd) noexcept {
  linger hard{1, 0};
  real().setsockopt(fd, SOL_SOCKET, SO_LINGER, &hard, sizeof hard);
  replace_all_with_unconnected_sockets(socket);
}

PrefixHandOn::PrefixHandOn(char* const* envp, const char* path) noexcept
    : original_(envp), module_follows_(preloads_this_module(envp)), path_(path) {}

PrefixHandOn::~PrefixHandOn() {
  SavedErrno keep_errno;
  for (const auto& entry : memfds_) real().close(entry.second);
}

bool PrefixHandOn::add(const TrackedSocket* socket, int target) noexcept {
  if (!module_follows_ && !brings_module_ && (this_module_path() == nullptr || !loads_preload_as_given(path_))) {
    return false;
  }
  int mfd = -1;
  for (const auto& [s, m] : memfds_) mfd = s == socket ? m : mfd;
  if (mfd < 0) {
    if ((mfd = prefix_in_memfd(socket)) < 0) return false;
    memfds_.emplace_back(socket, mfd);
  }
  char entry[48];
  std::snprintf(entry, sizeof entry, "%s%d:%d:%d", variable_.empty() ? "" : ",", target, mfd,
                socket->prefix.then_end() ? 1 : 0);
  variable_ += entry;
  brings_module_ = !module_follows_;
  return true;
}

char* const* PrefixHandOn::envp() noexcept {
  if (variable_.empty()) return original_;
  if (!envp_.empty()) return brings_module_ ? with_preload_.data() : envp_.data();
  variable_ = std::string(kExecPrefixVariable) + "=" + variable_;
  char* const* env = environment_with(original_, variable_, &envp_);
  if (!brings_module_) return env;
  // The module first, then whatever the caller's LD_PRELOAD named.
  preload_ = std::string("LD_PRELOAD=") + this_module_path();
  for (char* const* e = original_; e != nullptr && *e != nullptr; ++e) {
    if (std::strncmp(*e, "LD_PRELOAD=", 11) == 0 && (*e)[11] != '\0') preload_ += std::string(" ") + (*e + 11);
  }
  log_line("exec: the new program's environment had dropped the module; it is given back, for the peer's bytes a "
           "connection it inherits must deliver first");
  return environment_with(env, preload_, &with_preload_);
}

char* const* environment_with(char* const* base, std::string& entry, std::vector<char*>* storage) noexcept {
  const size_t name_len = entry.find('=') + 1;  // the name and its '='
  storage->clear();
  for (char* const* e = base; e != nullptr && *e != nullptr; ++e) {
    if (std::strncmp(*e, entry.c_str(), name_len) == 0) continue;
    storage->push_back(*e);
  }
  storage->push_back(entry.data());
  storage->push_back(nullptr);
  return storage->data();
}

ExecGuard::ExecGuard(char* const* envp, const char* path) noexcept
    : prefixes_(envp, path), returns_(prefixes_.module_follows()) {
  SavedErrno keep_errno;
  // Connections whose upgrade is still on TCP stay there, and the new program can use them.
  settle_all_sessions();
  // Lent by our parent and handed on to the new program: ours on TCP first. Lent to our children:
  // they get the connections now, since this image cannot answer them later (fork_service.h).
  claim_inherited_that_survive();
  claim_inherited_deferred_upgrades(survives_exec, /*lock_held=*/false, &returns_);
  answer_children_before_leaving(survives_exec);
  end_or_move_back_streams();
  hand_on_prefixes(&prefixes_);
  hand_on_returns(&returns_);
  finish_closing();  // streams closed before exec end before the image that holds them goes
}

void adopt_exec_prefixes() noexcept {
  const char* value = std::getenv(kExecPrefixVariable);
  if (value == nullptr) return;
  std::string entries = value;
  unsetenv(kExecPrefixVariable);
  std::vector<std::pair<int, int>> adopted;  // memfd, the first descriptor that took its prefix
  size_t pos = 0;
  while (pos < entries.size()) {
    size_t comma = entries.find(',', pos);
    std::string entry = entries.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? entries.size() : comma + 1;
    int fd = -1, mfd = -1, then_end = 0;
    if (std::sscanf(entry.c_str(), "%d:%d:%d", &fd, &mfd, &then_end) != 3 || fd < 0 || mfd < 0) continue;
    // Descriptors of one socket (dup'd) name one memfd: they share the socket, and so its prefix.
    int first = -1;
    for (const auto& [m, f] : adopted) first = m == mfd ? f : first;
    if (first >= 0) {
      track_duplicate(first, fd);
      continue;
    }
    struct stat st{};
    int domain = 0;
    socklen_t len = sizeof domain;
    bool usable = fstat(mfd, &st) == 0 && real().getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) == 0;
    std::vector<uint8_t> bytes(usable ? static_cast<size_t>(st.st_size) : 0);
    for (size_t done = 0; usable && done < bytes.size();) {
      ssize_t n = pread(mfd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(done));
      if (n <= 0) usable = false;
      done += n > 0 ? static_cast<size_t>(n) : 0;
    }
    real().close(mfd);
    adopted.emplace_back(mfd, fd);
    if (usable) track_new_socket(fd, domain, SocketRole::kServer);
    SocketHold socket = usable ? SocketHold::of(fd) : SocketHold{};
    if (!socket || !socket->prefix.set(bytes, then_end != 0)) {
      // Unreadable, or no memory to keep them: a gap in the bytes must never pass unnoticed.
      log_always("fd %d: the %zu bytes handed on at exec cannot be kept; the connection is reset", fd, bytes.size());
      reset_connection(fd);
      continue;
    }
    log_line("fd %d: %zu bytes of the peer's handed on at exec, to read first", fd, socket->prefix.size());
  }
}

}  // namespace tcp2rdma::preload
