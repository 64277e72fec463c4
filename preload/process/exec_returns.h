// exec and a connection's return to RDMA (docs/architecture.md, "Back to RDMA"). A connection that
// exec carries into a new program goes back to TCP first (exec_guard.h); an inetd-style server
// (accept, fork, the socket onto 0 and 1, exec) then serves it from a program that knows nothing of
// it. What its return needs goes along in the environment the new program gets
// (TCP2RDMA_TCP_RETURN), as a prefix does:
//  - the descriptors that name the connection, whether it is a client or a server connection, and how
//    many times it went onto RDMA (its next request names that count: TcpTuple::reserved);
//  - for a server connection, the memfd of its listener's directory (listener_directory.h), inherited:
//    the new program has no listener, and the process holding the listener's port (inetd) sends the
//    client's request to a port of the new program's own, as it does for a forked child.
// The new program (adopt_exec_returns, at load) tracks each as a connection back on TCP with a return
// planned by its own rules, and as shared (the exec'ing process's parent may still hold it): once no
// other process holds it, it goes back to RDMA at one of the new program's calls, as in a forked child.
// An upgrade a fork interrupted (process/deferred_upgrade.h) that the parent gave this process goes
// along the same way, with its TCP byte counts at the fork: the new program takes it up at its first
// use, its client's request still held by the process holding the listener's port.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace tcp2rdma::preload {

inline constexpr char kExecReturnVariable[] = "TCP2RDMA_TCP_RETURN";

class TrackedSocket;

// The returns a new program is to plan, named in the environment it is given. Used by exec.
class ReturnHandOn {
 public:
  // module_follows: whether the new program's environment preloads this module.
  explicit ReturnHandOn(bool module_follows) noexcept : module_follows_(module_follows) {}
  ~ReturnHandOn();  // the directory memfds' copies go (the new program has its own descriptors of them)
  ReturnHandOn(const ReturnHandOn&) = delete;
  ReturnHandOn& operator=(const ReturnHandOn&) = delete;

  // The new program's descriptor `target` will name `socket`. False when no return goes along: none is
  // planned (it was never on RDMA, it was passed on, it gave up), the module does not follow, or a
  // server connection has no listener directory to hand on (its log line says so).
  bool add(TrackedSocket* socket, int target) noexcept;
  // The upgrade a fork interrupted on `socket`, which the parent gave this process, is the new
  // program's (its descriptors then go along through add()). False when it cannot go (the module does
  // not follow, no directory): it stays TCP.
  bool add_upgrade(TrackedSocket* socket) noexcept;
  // `base` (the environment the new program gets otherwise) plus the variable when anything was added.
  char* const* envp(char* const* base) noexcept;

 private:
  // The copy, inheritable, of a directory's memfd for the new program (one per memfd), or -1.
  int inheritable_copy(int memfd) noexcept;

  // An upgrade handed on: its socket, the directory's memfd copy, its TCP counts at the fork.
  struct Upgrade {
    const TrackedSocket* socket;
    int memfd;
    uint64_t sent, received;
    bool sending_ended;
  };

  const bool module_follows_;
  std::vector<Upgrade> upgrades_;
  std::vector<const TrackedSocket*> sockets_;       // an entry's index names its socket: dup'd descriptors share it
  std::vector<std::pair<int, int>> memfd_copies_;  // the directory's memfd here, its inheritable copy
  std::string variable_;
  std::vector<char*> envp_;
};

// At load, after adopt_exec_prefixes: the returns an exec'ing process handed on become planned
// returns of the inherited connections; the variable is then removed, so that a later exec starts
// afresh.
void adopt_exec_returns() noexcept;

}  // namespace tcp2rdma::preload
