#include "process/exec_returns.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

#include "libc/kept_descriptors.h"
#include "libc/real_calls.h"
#include "listener/listener_directory.h"
#include "listener/listener_state.h"
#include "own_descriptors.h"
#include "process/exec_guard.h"
#include "registry/connection_path.h"
#include "registry/connection_policy.h"
#include "registry/socket_registry.h"
#include "registry/tracked_socket.h"
#include "registry/upgrade_session.h"
#include "util/log.h"
#include "util/saved_errno.h"

namespace tcp2rdma::preload {
namespace {

// The memfd of `listener`'s directory, or -1 (none: a process that never forked after accepting).
int directory_memfd_of(const TrackedSocket* listener) {
  ListenerState* state = listener != nullptr ? listener_state(listener) : nullptr;
  return state != nullptr && state->directory.load() != nullptr ? state->directory_memfd.load() : -1;
}

// The listener that accepted the server connection `socket`: the one a forked child kept for its
// return (ForkShare::return_listener), else this process's own that accepted it; empty when neither.
SocketHold accepting_listener(TrackedSocket* socket) {
  SocketHold listener = socket->forks.return_listener();
  if (!listener) {
    for_each_tracked_fd([&](int, SocketHold& candidate) {
      if (!listener && candidate->role() == SocketRole::kListener && socket->forks.accepted_from(candidate.get())) {
        listener = SocketHold(candidate.get());
      }
    });
  }
  return listener;
}

// A listener for the new program's returns of server connections: no descriptor, no kernel socket,
// only the family's directory mapped from `memfd` (which it keeps, close-on-exec, for a later exec).
// Its RDMA listener is made on a port of this process's own at the first return
// (prefork_listeners.h: claim_rdma_listener), as in a forked child that closed the listener.
SocketHold directory_listener(int memfd, int domain) {
  ListenerDirectory* directory = ListenerDirectory::map(memfd);
  if (directory == nullptr) return {};
  auto* listener = new (std::nothrow) TrackedSocket(domain, SocketRole::kListener);
  if (listener == nullptr) {
    ListenerDirectory::unmap(directory);
    return {};
  }
  SocketHold held(listener);
  listener->release();  // the hold is the only reference
  ListenerState* state = make_listener_state(listener);
  if (state == nullptr) {
    ListenerDirectory::unmap(directory);
    return {};
  }
  real().fcntl(memfd, F_SETFD, FD_CLOEXEC);
  state->directory_memfd.store(memfd);
  keep_from_application(memfd);
  state->directory.store(directory);
  state->rdma_handed_on.store(true);  // a process of the family may make the RDMA listener
  return held;
}

// One entry of the variable: a descriptor of an inherited connection,
// "FD:KIND:UPGRADES:MEMFD:INDEX:SENT:RECEIVED:ENDED:CREATOR:ALONE".
struct Entry {
  int fd = -1;
  char kind = 0;  // 'c' a client's return, 's' a server's, 'u' an upgrade a fork interrupted
  unsigned upgrades = 0;
  int memfd = -1;  // the directory's, for a server connection
  unsigned index = 0;
  unsigned long long sent = 0, received = 0;  // an upgrade's TCP counts at the fork
  int sending_ended = 0;
  int creator = 0;  // the process that made the socket (ForkShare::creator)
  int alone = 0;    // 1: the exec'ing process held it alone (no other process may hold it)
};
constexpr char kEntryFormat[] = "%d:%c:%u:%d:%zu:%llu:%llu:%d:%d:%d";

bool parse(const std::string& text, Entry* e) {
  return std::sscanf(text.c_str(), "%d:%c:%u:%d:%u:%llu:%llu:%d:%d:%d", &e->fd, &e->kind, &e->upgrades, &e->memfd,
                     &e->index, &e->sent, &e->received, &e->sending_ended, &e->creator, &e->alone) == 10 &&
         e->fd >= 0 && (e->kind == 'c' || e->kind == 's' || e->kind == 'u') && e->upgrades <= 255 && e->creator >= 0;
}

// The connection on e.fd back on TCP, with a return planned by this program's rules through
// `listener` (servers). Nothing when the rules keep it on TCP.
void plan_inherited_return(TrackedSocket* socket, int fd, const Entry& e, const SocketHold& listener) {
  config::Role role = e.kind == 'c' ? config::Role::kClient : config::Role::kServer;
  socket->set_role(role == config::Role::kClient ? SocketRole::kClient : SocketRole::kServer);
  config::Decision decision = decide_connection(fd, role);
  char label[kConnectionLabelSize];
  describe_connection(fd, role, decision, label, sizeof label);
  if (decision.rule == nullptr || decision.options->transport != config::Transport::kRdma) {
    log_line("%s: stays on tcp in this program, which the process exec'd with it", label);
    return;
  }
  if (role == config::Role::kServer && !listener) {
    log_line("%s: stays on tcp for good (the program that exec'd this one handed on no listener directory)", label);
    return;
  }
  UpgradeSession* session = socket->start_session();
  if (session == nullptr) return;  // one already: not a connection this program just got
  session->set_label(label);
  (void)session->end_on_tcp();  // the ended session that a return's follows (start_return_session)
  socket->adopt_upgrades(static_cast<uint8_t>(e.upgrades));
  socket->forks.note_inherited(static_cast<pid_t>(e.creator), e.alone != 0);
  if (listener) socket->forks.keep_return_listener(listener.get());
  socket->returns.remember(decision);
  socket->returns.arm(std::chrono::steady_clock::now());  // before the path says back on TCP
  socket->move_path(Path::kTcp, Path::kBackOnTcp);
  log_line("%s: back on tcp in this program, which the process exec'd with it: it may go back to rdma here once no "
           "other process holds it",
           label);
}

// The upgrade a fork interrupted on e.fd, this program's now: deferred here as in the process that
// forked, taken up at the first call the module routes (process/deferred_upgrade.h), its session
// going on from the counts at the fork. Stays TCP when this program's rules keep it there (its
// client's request is then never answered, and the client's upgrade times out).
void plan_handed_upgrade(TrackedSocket* socket, int fd, const Entry& e, const SocketHold& listener) {
  socket->set_role(SocketRole::kServer);
  config::Decision decision = decide_connection(fd, config::Role::kServer);
  char label[kConnectionLabelSize];
  describe_connection(fd, config::Role::kServer, decision, label, sizeof label);
  if (decision.rule == nullptr || decision.options->transport != config::Transport::kRdma || !listener) {
    log_line("%s: stays tcp in this program, which the process exec'd with it (%s)", label,
             listener ? "its rules keep it on tcp" : "no listener directory came with it");
    return;
  }
  auto record = std::unique_ptr<DeferredUpgrade>(new (std::nothrow) DeferredUpgrade);
  UpgradeSession* session = record != nullptr ? socket->start_session() : nullptr;
  if (session == nullptr) return;
  session->adopt_counts(e.sent, e.received, e.sending_ended != 0);
  session->set_label(label);
  (void)session->end_on_tcp();  // the ended session the take-up goes on from (restart_session)
  listener->add_ref();  // the record's
  record->listener = listener.get();
  record->decision = decision;
  record->generation = fork_generation();
  record->lent_at = std::chrono::steady_clock::now();
  record->handed_at_exec = true;
  socket->defer_upgrade(std::move(record));
  log_line("%s: the upgrade a fork interrupted is this program's, which the process exec'd with it: it goes on at "
           "its first use",
           label);
}

// Whether fd is a listener directory's memfd (ListenerDirectory::create), by its name: a variable
// left over by a program without the module between two that have it could name another descriptor.
bool is_directory_memfd(int fd) {
  char path[32], target[64];
  std::snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(path, target, sizeof target - 1);
  if (n <= 0) return false;
  target[n] = '\0';
  return std::strncmp(target, "/memfd:tcp2rdma-directory", 25) == 0;
}

// The listener for the directory in `memfd`: made at its first entry, found at the next ones.
SocketHold listener_for_memfd(int memfd, int domain, std::vector<std::pair<int, SocketHold>>* listeners) {
  for (const auto& [known, listener] : *listeners) {
    if (known == memfd) return SocketHold(listener.get());
  }
  bool ours = is_directory_memfd(memfd);
  SocketHold made = ours ? directory_listener(memfd, domain) : SocketHold{};
  if (!made && ours) real().close(memfd);  // no use here without a mapping
  try {
    listeners->emplace_back(memfd, SocketHold(made.get()));
  } catch (const std::bad_alloc&) {
  }
  return made;
}

// Whether descriptors a and b name one open file (dup'd: the same socket).
bool same_file(int a, int b) {
  struct stat sa {}, sb {};
  return fstat(a, &sa) == 0 && fstat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

// Splits the variable's value into entries.
std::vector<std::string> entries_of(const std::string& value) {
  std::vector<std::string> out;
  for (size_t pos = 0; pos < value.size();) {
    size_t comma = value.find(',', pos);
    if (comma == std::string::npos) comma = value.size();
    out.push_back(value.substr(pos, comma - pos));
    pos = comma + 1;
  }
  return out;
}

}  // namespace

ReturnHandOn::~ReturnHandOn() {
  SavedErrno keep_errno;
  for (const auto& copy : memfd_copies_) real().close(copy.second);  // the upgrades' copies among them
}

int ReturnHandOn::inheritable_copy(int memfd) noexcept {
  for (const auto& [original, copy] : memfd_copies_) {
    if (original == memfd) return copy;
  }
  int copy = -1;
  {
    transport::OwnDescriptors window;  // above the application's numbers, here and in the new program
    copy = window.place(real().fcntl(memfd, F_DUPFD_CLOEXEC, 0));
  }
  if (copy < 0) return -1;
  if (real().fcntl(copy, F_SETFD, 0) != 0) {
    real().close(copy);
    return -1;
  }
  try {
    memfd_copies_.emplace_back(memfd, copy);
  } catch (const std::bad_alloc&) {
    real().close(copy);
    return -1;
  }
  return copy;
}

bool ReturnHandOn::add_upgrade(TrackedSocket* socket) noexcept {
  const DeferredUpgrade* record = socket->deferred_upgrade();
  UpgradeSession* session = socket->session();
  if (!module_follows_ || record == nullptr || session == nullptr) return false;
  for (const Upgrade& u : upgrades_) {
    if (u.socket == socket) return true;  // another descriptor of it, met first
  }
  int memfd = directory_memfd_of(record->listener);
  int copy = memfd >= 0 ? inheritable_copy(memfd) : -1;
  if (copy < 0) return false;
  try {
    upgrades_.push_back(Upgrade{socket, copy, session->sent(), session->received(), session->sending_ended()});
  } catch (const std::bad_alloc&) {
    return false;
  }
  if (!record->handed_on) {
    log_line("%s: the upgrade a fork interrupted goes on in the program this process execs", connection_label(socket));
  }
  return true;
}

bool ReturnHandOn::add(TrackedSocket* socket, int target) noexcept {
  const Upgrade* upgrade = nullptr;
  for (const Upgrade& u : upgrades_) upgrade = u.socket == socket ? &u : upgrade;
  if (upgrade == nullptr) {
    if (!module_follows_ || !socket->back_on_tcp() || !socket->returns.armed() || socket->forks.passed()) return false;
    if (socket->role() != SocketRole::kClient && socket->role() != SocketRole::kServer) return false;
  }
  char kind = upgrade != nullptr ? 'u' : socket->role() == SocketRole::kClient ? 'c' : 's';
  int copy = upgrade != nullptr ? upgrade->memfd : -1;
  if (kind == 's') {
    SocketHold listener = accepting_listener(socket);
    int memfd = directory_memfd_of(listener.get());
    copy = memfd >= 0 ? inheritable_copy(memfd) : -1;
    if (copy < 0) {
      log_line("fd %d: stays on tcp in the new program (no listener directory to hand on)", target);
      return false;
    }
  }
  try {
    size_t index = 0;
    while (index < sockets_.size() && sockets_[index] != socket) ++index;
    if (index == sockets_.size()) sockets_.push_back(socket);
    char entry[128];
    std::snprintf(entry, sizeof entry, kEntryFormat, target, kind, static_cast<unsigned>(socket->upgrades()), copy,
                  index, static_cast<unsigned long long>(upgrade != nullptr ? upgrade->sent : 0),
                  static_cast<unsigned long long>(upgrade != nullptr ? upgrade->received : 0),
                  upgrade != nullptr && upgrade->sending_ended ? 1 : 0,
                  socket->forks.creator() != 0 ? static_cast<int>(socket->forks.creator()) : static_cast<int>(getpid()),
                  socket->shared() ? 0 : 1);
    if (!variable_.empty()) variable_ += ',';
    variable_ += entry;
  } catch (const std::bad_alloc&) {
    return false;
  }
  return true;
}

char* const* ReturnHandOn::envp(char* const* base) noexcept {
  if (variable_.empty()) return base;
  if (!envp_.empty()) return envp_.data();
  variable_ = std::string(kExecReturnVariable) + "=" + variable_;
  return environment_with(base, variable_, &envp_);
}

void adopt_exec_returns() noexcept {
  const char* value = std::getenv(kExecReturnVariable);
  if (value == nullptr) return;
  std::vector<std::string> entries = entries_of(value);
  unsetenv(kExecReturnVariable);
  std::vector<std::pair<unsigned, int>> first_fd;      // an entry's index, the first descriptor of it
  std::vector<std::pair<int, SocketHold>> listeners;  // a directory's memfd, its listener here (or none)
  for (const std::string& text : entries) {
    Entry e;
    if (!parse(text, &e)) continue;
    int first = -1;
    for (const auto& [index, fd] : first_fd) first = index == e.index ? fd : first;
    if (first >= 0) {
      // A prefix's adoption may have done it; a left-over variable may name another descriptor.
      if (!SocketHold::of(e.fd) && same_file(first, e.fd)) track_duplicate(first, e.fd);
      continue;
    }
    int domain = 0;
    socklen_t len = sizeof domain;
    if (real().getsockopt(e.fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0 || (domain != AF_INET && domain != AF_INET6)) {
      continue;
    }
    first_fd.emplace_back(e.index, e.fd);
    if (!SocketHold::of(e.fd)) track_new_socket(e.fd, domain, SocketRole::kUnknown);
    SocketHold socket = SocketHold::of(e.fd);
    if (!socket) continue;
    SocketHold listener = e.memfd >= 0 ? listener_for_memfd(e.memfd, domain, &listeners) : SocketHold{};
    if (e.kind == 'u') {
      plan_handed_upgrade(socket.get(), e.fd, e, listener);
    } else {
      plan_inherited_return(socket.get(), e.fd, e, listener);
    }
  }
}

}  // namespace tcp2rdma::preload
