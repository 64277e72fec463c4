// exec and the connections this process holds (docs/architecture.md, "fork and exec"). The new
// program gets the descriptors without FD_CLOEXEC, but nothing of this image's memory: no stream, no
// prefix. So before the real exec:
//  - a connection on RDMA that a descriptor carries into the new program goes back to TCP (the rule's
//    on_fork: tcp), and the new program uses the TCP socket;
//  - a stream whose every descriptor is close-on-exec ends as its last close() would end it;
//  - one carried on that could not go back (on_fork: parent, or a peer that did not answer) is
//    flushed and reset, and its descriptors name an unconnected socket: the new program fails loudly;
//  - a carried socket back on TCP with a prefix (the peer's bytes kept from the stream) hands the
//    prefix on in a memfd that TCP2RDMA_TCP_PREFIX in the new environment names, and the module reads
//    it at load (adopt_exec_prefixes). If the new environment does not preload the module, the
//    connection is reset instead: a gap in the bytes must never pass unnoticed;
//  - a carried connection back on TCP with a return planned hands that on too (exec_returns.h).
// If exec fails, this process goes on with its connections as they now are (back on TCP).
#pragma once

#include <string>
#include <vector>

#include "process/exec_returns.h"

namespace tcp2rdma::preload {

inline constexpr char kExecPrefixVariable[] = "TCP2RDMA_TCP_PREFIX";

class TrackedSocket;

// The prefixes a new program is to get, each in a memfd (one per socket) that it inherits, named in
// the environment it is given. Used by exec and by posix_spawn (spawn_guard.h).
class PrefixHandOn {
 public:
  // envp: the environment the caller gives the new program. `path`, when known, is the program's:
  // one that runs without the loader's secure mode may be given the module back (below).
  explicit PrefixHandOn(char* const* envp, const char* path = nullptr) noexcept;
  ~PrefixHandOn();  // the memfds go (the new program has its own descriptors of them)
  PrefixHandOn(const PrefixHandOn&) = delete;
  PrefixHandOn& operator=(const PrefixHandOn&) = delete;

  // The new program's descriptor `target` will name `socket`, which has a prefix. False when the
  // prefix cannot go along (no memfd; or the new environment does not preload the module and the
  // program cannot be given it back: a set-user-ID, set-group-ID or capable program, or one found
  // through PATH).
  //
  // A program whose environment dropped LD_PRELOAD (openbsd-inetd strips it from its services') is
  // given the module back, alone of what was dropped, when a connection it inherits has bytes of the
  // peer's that it must read first: they left the kernel's socket on RDMA, and only the module can
  // hand them on. Without it the connection would be reset.
  bool add(const TrackedSocket* socket, int target) noexcept;
  // The environment to start the new program with: the caller's, plus the variable if anything was added.
  char* const* envp() noexcept;
  // Whether the new program's environment preloads this module.
  bool module_follows() const noexcept { return module_follows_; }

 private:
  char* const* original_;
  bool module_follows_;
  const char* path_;        // the program, when exec names it: looked at only if the module must follow
  bool brings_module_ = false;  // LD_PRELOAD names the module again in envp()
  std::vector<std::pair<const TrackedSocket*, int>> memfds_;  // one per socket, dup'd or not
  std::string variable_;
  std::string preload_;  // LD_PRELOAD=... when brought back
  std::vector<char*> envp_;
  std::vector<char*> with_preload_;
};

class ExecGuard {
 public:
  // envp: the environment the caller gives the new program; path: the program, when exec names it
  // (not found through PATH).
  explicit ExecGuard(char* const* envp, const char* path = nullptr) noexcept;
  ExecGuard(const ExecGuard&) = delete;
  ExecGuard& operator=(const ExecGuard&) = delete;

  // The environment to exec with: the caller's, plus the prefixes' and the returns' variables when
  // there are any.
  char* const* envp() noexcept { return returns_.envp(prefixes_.envp()); }

 private:
  PrefixHandOn prefixes_;
  ReturnHandOn returns_;
};

// `base` without any entry of the variable `entry` names ("NAME=value") and with `entry` added, in
// *storage (pointers to `base`'s strings and to `entry`, which must outlive the result).
char* const* environment_with(char* const* base, std::string& entry, std::vector<char*>* storage) noexcept;

// Every descriptor of `socket` (fd one of them) names an unconnected socket from here on, and the
// connection is reset if these were its last references (SO_LINGER {on, 0}): what a new program, or
// another process the connection is passed to, cannot be handed whole fails loudly.
void reset_and_disown(TrackedSocket* socket, int fd) noexcept;

// At load: the prefixes an exec'ing process handed on (TCP2RDMA_TCP_PREFIX) become the prefixes of
// the inherited sockets; the variable is then removed, so that a later exec starts afresh.
void adopt_exec_prefixes() noexcept;

}  // namespace tcp2rdma::preload
