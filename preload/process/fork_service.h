// Forks of a process whose connections are on RDMA (docs/architecture.md, "Forks"). The process that
// uses a connection owns it: a fork leaves each connection on RDMA in the parent, lent to the child
// (registry/lent_streams.h), and costs it nothing while the child leaves its copy alone (redis's
// BGSAVE child, a logger). A child that uses its copy (reads, writes, polls, registers it with epoll,
// shuts it down, execs or forks with it) asks the parent over their fork channel
// (process/fork_channel.h) and waits: the parent's thread of this file moves the connection back to
// TCP and answers with the peer's bytes that were on the stream unread, which the child reads first;
// from then on both processes share the TCP socket as they would without the module. A parent that
// closes its last descriptor of a lent connection (PostgreSQL's postmaster, inetd) moves it back the
// same way and keeps the answer for the child; one that exits or execs sends it unasked.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <vector>

#include "registry/lent_streams.h"

namespace tcp2rdma::preload {

class TrackedSocket;

// The fork wrapper's part, around the real fork.
class ForkLending {
 public:
  ForkLending() = default;
  ~ForkLending();
  ForkLending(const ForkLending&) = delete;
  ForkLending& operator=(const ForkLending&) = delete;

  // Before the real fork: every connection of this process on RDMA whose rule says on_fork: tcp is to
  // be lent, over a new channel. False when some are to be lent but no channel can be had: the caller
  // then moves them back to TCP first, as the fork of a process without this service would.
  bool prepare() noexcept;
  // After it, in the parent (child < 0: the fork failed): the lendings are noted and the thread that
  // answers the child runs.
  void in_parent(pid_t child) noexcept;
  // After it, in the child: the channel to the parent is this process's; the parent's streams that
  // were not lent (on_fork: parent) fail loudly here; the parent's other channels are closed.
  void in_child() noexcept;

 private:
  int ends_[2] = {-1, -1};  // [0] the parent's, [1] the child's
  std::vector<uint64_t> serials_;
  bool deferred_ = false;  // some are upgrades this process deferred (deferred_upgrade.h)
};

// The child's side: fd names a connection the parent lent (TrackedSocket::stream_of_parent). Asks for
// it and waits for the answer (up to the parent's move, bounded); then the connection is on TCP here
// after the peer's unread bytes, or, when the parent cannot hand it over, fails loudly (ENOTCONN,
// EPIPE; reset when the parent let go of it and its move failed).
// `reading`: the call only reads; the parent may then keep the connection on RDMA and relay the
// peer's bytes (back_to_tcp/read_relay.h), and later reads here take from the relay's queue.
void claim_from_parent(TrackedSocket* socket, int fd, bool reading = false) noexcept;
// A connection this child claimed while its parent still held it (TrackedSocket::forks,
// awaits_parents_word), at an attempt to return it to RDMA: asks the parent whether it let go since,
// forked or spawned none while it still had a descriptor of it, and lent it to no other child (at most
// 500 ms, never behind another claim).
// True, and the connection is this process's alone, when it did.
bool learn_if_alone(TrackedSocket* socket) noexcept;
// Every inherited one: before this process forks (its child could not ask our parent) and before
// exec and spawn (the new program gets the connection on TCP, with its unread bytes).
void claim_all_from_parent() noexcept;
// The child's side for a connection whose upgrade the parent deferred at the fork
// (deferred_upgrade.h): the parent's answer, asked for now (kGone when it was not lent to this child).
HandBack claim_deferred_from_parent(uint64_t serial) noexcept;
// At exit and before exec: every answer that the children have not claimed yet is sent unasked, since
// this process cannot answer later. `survives` (exec): whether the new program keeps a descriptor of
// a socket (a deferred upgrade then stays TCP in the children).
void answer_children_before_leaving(bool (*survives)(const TrackedSocket*) = nullptr) noexcept;

}  // namespace tcp2rdma::preload
