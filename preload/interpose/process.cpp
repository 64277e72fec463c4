// Processes. The child of fork() inherits the descriptors and, as a copy of this memory, the fd table
// that describes them, which stays true for sockets that are on TCP. A connection on RDMA stays on
// RDMA in the parent and is lent to the child (process/fork_service.h): a child that never uses its
// copy costs it nothing, and one that does asks the parent, which moves it back to TCP for both. A
// connection whose rule says on_fork: parent is the parent's alone and fails loudly in the child.
#include <unistd.h>

#include <cstdarg>
#include <vector>

#include "back_to_tcp/move_back.h"
#include "back_to_tcp/path_watcher.h"
#include "libc/interposed.h"
#include "listener/prefork_listeners.h"
#include "process/deferred_upgrade.h"
#include "process/exec_guard.h"
#include "process/fork_service.h"
#include "process/spawn_guard.h"
#include "readiness/epoll_sets.h"
#include "registry/socket_holders.h"
#include "registry/socket_registry.h"
#include "registry/tracked_socket.h"
#include "registry/upgrade_session.h"

using tcp2rdma::preload::real;

T2R_INTERPOSE pid_t fork(void) {
  // A server connection whose upgrade is still on TCP is deferred: the process that uses it next takes
  // the upgrade up (process/deferred_upgrade.h); any other session still on TCP stays TCP, so that the
  // child can use it too; one in the middle of its switch is waited for (and is then the parent's, as
  // every upgraded one).
  // No session starts from here until the real fork is done: it could not be settled. Connections
  // this process holds from its own parent become its own first (its child could not ask for them).
  tcp2rdma::preload::hold_take_ups_for_fork();
  tcp2rdma::preload::close_fork_gate();
  tcp2rdma::preload::claim_inherited_deferred_upgrades(/*survives=*/nullptr, /*lock_held=*/true);
  tcp2rdma::preload::defer_sessions_for_fork();
  tcp2rdma::preload::claim_all_from_parent();
  tcp2rdma::preload::ForkLending lending;
  if (!lending.prepare()) {
    tcp2rdma::preload::move_streams_back("fork");
    tcp2rdma::preload::drop_deferred_upgrades();
  }
  tcp2rdma::preload::mark_listeners_to_hand_on();
  tcp2rdma::preload::epoll_hold_for_fork();
  tcp2rdma::preload::spawn_hold_for_fork();
  tcp2rdma::preload::numbers_hold_for_fork();
  tcp2rdma::preload::note_forking();  // from here every connection may be the child's too
  pid_t parent = getpid();
  pid_t pid = real().fork();
  int saved = errno;
  tcp2rdma::preload::numbers_release_after_fork();
  tcp2rdma::preload::spawn_release_after_fork();
  tcp2rdma::preload::epoll_release_after_fork();
  tcp2rdma::preload::open_fork_gate(pid == 0);
  tcp2rdma::preload::release_take_ups_after_fork(pid == 0);
  if (pid == 0) {
    tcp2rdma::preload::note_forked_child();  // inherited streams and listeners are not ours to use
    tcp2rdma::preload::forget_path_watcher_after_fork();
    tcp2rdma::preload::renew_listener_locks();
    tcp2rdma::preload::socket_holders_after_fork();
    tcp2rdma::preload::note_sockets_made_before_fork(parent);
    lending.in_child();
  } else {
    lending.in_parent(pid);
    tcp2rdma::preload::hand_on_marked_listeners(pid > 0);
  }
  errno = saved;
  return pid;
}

// vfork's child borrows the parent's stack until it execs or exits, so a wrapper cannot return to it
// safely: a wrapper frame would be popped by the child and then reused by the parent. POSIX allows
// vfork to be fork, and fork is what the module gives.
T2R_INTERPOSE pid_t vfork(void) { return fork(); }

// exec: the new program starts clean, with its connections on TCP (exec_guard.h). glibc's exec
// functions call the system call directly, not each other through the PLT, so every variant is
// wrapped; the l-forms gather their arguments and go through the v-forms, and the forms without an
// environment give exec this process's. If exec fails, the connections stay as ExecGuard left them.
using tcp2rdma::preload::ExecGuard;

namespace {

// An l-form's arguments, `first` up to and including the terminating null, as an argv array; `next`
// reads the following one (the va_list is then just past the null, where execle's envp is).
template <typename Next>
std::vector<char*> gather_arguments(const char* first, Next next) {
  std::vector<char*> argv{const_cast<char*>(first)};
  while (argv.back() != nullptr) argv.push_back(next());
  return argv;
}

}  // namespace

T2R_INTERPOSE int execve(const char* path, char* const argv[], char* const envp[]) {
  ExecGuard guard(envp, path);
  return real().execve(path, argv, guard.envp());
}

T2R_INTERPOSE int execv(const char* path, char* const argv[]) {
  ExecGuard guard(environ, path);
  return real().execve(path, argv, guard.envp());
}

T2R_INTERPOSE int execvp(const char* file, char* const argv[]) {
  ExecGuard guard(environ);
  return real().execvpe(file, argv, guard.envp());
}

T2R_INTERPOSE int execvpe(const char* file, char* const argv[], char* const envp[]) {
  ExecGuard guard(envp);
  return real().execvpe(file, argv, guard.envp());
}

T2R_INTERPOSE int execveat(int dirfd, const char* path, char* const argv[], char* const envp[], int flags) {
  ExecGuard guard(envp);
  return real().execveat(dirfd, path, argv, guard.envp(), flags);
}

T2R_INTERPOSE int fexecve(int fd, char* const argv[], char* const envp[]) {
  ExecGuard guard(envp);
  return real().fexecve(fd, argv, guard.envp());
}

// posix_spawn and the calls built on it inside glibc: the new program gets no stream (SpawnGuard).
T2R_INTERPOSE int posix_spawn(pid_t* pid, const char* path, const posix_spawn_file_actions_t* actions,
                              const posix_spawnattr_t* attr, char* const argv[], char* const envp[]) {
  tcp2rdma::preload::SpawnGuard guard(actions, envp);
  if (guard.error() != 0) return guard.error();
  return real().posix_spawn(pid, path, actions, attr, argv, guard.envp());
}

T2R_INTERPOSE int posix_spawnp(pid_t* pid, const char* file, const posix_spawn_file_actions_t* actions,
                               const posix_spawnattr_t* attr, char* const argv[], char* const envp[]) {
  tcp2rdma::preload::SpawnGuard guard(actions, envp);
  if (guard.error() != 0) return guard.error();
  return real().posix_spawnp(pid, file, actions, attr, argv, guard.envp());
}

// Which descriptors a spawn hands on under which number, for SpawnGuard.
T2R_INTERPOSE int posix_spawn_file_actions_init(posix_spawn_file_actions_t* actions) {
  tcp2rdma::preload::forget_spawn_actions(actions);  // the memory of an object never destroyed, reused
  return real().posix_spawn_file_actions_init(actions);
}

T2R_INTERPOSE int posix_spawn_file_actions_adddup2(posix_spawn_file_actions_t* actions, int fd, int newfd) {
  int rc = real().posix_spawn_file_actions_adddup2(actions, fd, newfd);
  if (rc == 0) tcp2rdma::preload::note_spawn_dup2(actions, fd, newfd);
  return rc;
}

T2R_INTERPOSE int posix_spawn_file_actions_destroy(posix_spawn_file_actions_t* actions) {
  tcp2rdma::preload::forget_spawn_actions(actions);
  return real().posix_spawn_file_actions_destroy(actions);
}

T2R_INTERPOSE int system(const char* command) {
  tcp2rdma::preload::SpawnGuard guard;
  return real().system(command);
}

T2R_INTERPOSE FILE* popen(const char* command, const char* type) {
  tcp2rdma::preload::SpawnGuard guard;
  return real().popen(command, type);
}

T2R_INTERPOSE int execl(const char* path, const char* arg, ...) {
  va_list ap;
  va_start(ap, arg);
  auto argv = gather_arguments(arg, [&] { return va_arg(ap, char*); });
  va_end(ap);
  return execv(path, argv.data());
}

T2R_INTERPOSE int execlp(const char* file, const char* arg, ...) {
  va_list ap;
  va_start(ap, arg);
  auto argv = gather_arguments(arg, [&] { return va_arg(ap, char*); });
  va_end(ap);
  return execvp(file, argv.data());
}

T2R_INTERPOSE int execle(const char* path, const char* arg, ...) {
  va_list ap;
  va_start(ap, arg);
  auto argv = gather_arguments(arg, [&] { return va_arg(ap, char*); });
  char* const* envp = va_arg(ap, char* const*);
  va_end(ap);
  return execve(path, argv.data(), envp);
}
