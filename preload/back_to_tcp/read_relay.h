// A forked child that only reads a connection its parent keeps on RDMA (docs/architecture.md,
// "Forks"). rsync's receiving side forks: the child (the receiver) only reads the socket, the parent
// (the generator) only writes it. A verbs queue pair belongs to the process that made it, so the
// child cannot read the stream itself; moving the connection back to TCP at its first read would put
// the whole transfer on TCP. Instead the parent's relay takes the peer's bytes off the stream into a
// queue in shared memory (TcpPrefix, start_relay) that both processes read, each byte going to
// whichever reads first, as with a socket's queue; an eventfd rings when bytes come. The parent's
// writes stay on RDMA. Anything of the child's but reading (a write, a shutdown, epoll, exec, fork)
// claims the connection as before: the relay stops, the connection moves back to TCP, and what the
// peer sent after the relay's last byte follows it in the same queue.
#pragma once

#include <sys/epoll.h>

#include <vector>

#include "registry/tracked_socket.h"

namespace tcp2rdma::preload {

struct HandBack;

// The parent's answer to a claim that only reads, from the child behind `channel`: the connection is
// on RDMA here and that child is the only one that holds it: the relay starts and *answer says
// kRelayed. False when it cannot (the caller moves the connection back, as for any claim).
bool start_read_relay(TrackedSocket* socket, int channel, HandBack* answer) noexcept;

// Around a move of the connection back to TCP (move_back.h): the relay takes nothing more off the
// stream; the mover's TcpPrefix::set or set_shared adds what is left after the relay's last byte and
// ends the feeding. A move that fails leaves the queue fed: the relay goes on when the pause ends.
class RelayPause {
 public:
  explicit RelayPause(TrackedSocket* socket) noexcept;
  ~RelayPause();
  RelayPause(const RelayPause&) = delete;
  RelayPause& operator=(const RelayPause&) = delete;

 private:
  uint64_t serial_ = 0;  // 0: no relay was running
};

// epoll_ctl of this process (the parent) asks for the input of a connection a relay feeds to a child:
// the set would wait on the stream, whose bytes the relay takes. The connection moves back to TCP
// first (the queue's bytes, then the kernel's, as after any claim), and true says the registration
// is the kernel socket's now.
bool moved_back_for_epoll(TrackedSocket* socket, int fd, int op, const epoll_event* event) noexcept;

// The sockets a relay holds (some this process may have closed every descriptor of, while a child
// still reads them): at exit and exec they are handed to the children as lent connections are.
std::vector<SocketHold> relayed_sockets() noexcept;

// In a forked child: the parent's relays and their descriptors are not ours.
void forget_read_relays_after_fork() noexcept;

}  // namespace tcp2rdma::preload
