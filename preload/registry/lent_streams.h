// Connections on RDMA that a fork lent to a child (docs/architecture.md, "Forks"): the parent goes on
// using the stream, and a child that uses its copy of the descriptor asks for the connection
// (process/fork_channel.h): the parent then moves it back to TCP and hands that child the peer's bytes
// that were on the stream unread. Until every child that may ask is gone, the parent's last close of
// the connection must not end it (the child goes on with it, as with a shared kernel socket): the
// stream is moved back instead and the answer kept here for the child's claim.
#pragma once

#include <cstdint>
#include <optional>
#include <memory>
#include <utility>
#include <vector>

namespace tcp2rdma::transport {
class RdmaStream;
}

namespace tcp2rdma::preload {

class TcpPrefix;
class TrackedSocket;

// What became of a connection the parent lent to its children.
struct HandBack {
  enum class Outcome : uint8_t {
    kMoved,   // on TCP now: `bytes` first, then (if `then_end`) the end, else the kernel's bytes
    kFailed,   // the parent let go and its move failed (the peer did not answer): the connection is reset
    kParents,  // the parent could not move it and keeps it on RDMA: the child's copy fails loudly
    kGone,     // the parent holds no such connection (it ended before the child asked)
    // A connection whose upgrade was still on TCP at the fork (process/deferred_upgrade.h):
    kResume,   // the parent let go of it: the child takes the upgrade up, with its own RDMA listener
    kStaysTcp, // the parent uses it too: it stays TCP in both, as a shared kernel socket
    // A claim to read only (back_to_tcp/read_relay.h): the connection stays on RDMA in the parent, whose
    // relay takes the peer's bytes off the stream into `shared_prefix`, a queue both processes read,
    // rung by `relay_wake`. Anything but reading claims the connection again.
    kRelayed,
  };
  Outcome outcome = Outcome::kGone;
  bool then_end = false;    // the peer's sending side had ended on the stream
  bool write_shut = false;  // the parent's sending side had: the TCP socket's must be shut down too
  // kMoved: the parent let go of the connection (its last close, its exit, an exec that keeps no
  // descriptor of it) and lent it to no other child still alive: the child that gets this answer
  // holds it alone and may take it back to RDMA (TrackedSocket::note_alone). Set by the parent when
  // it lets go; kept only for the one child it is sent to (held_only_by).
  bool alone = false;
  std::vector<uint8_t> bytes;
  // kMoved: instead of `bytes`, the parent's own prefix in a memfd (TcpPrefix::set_shared), which the
  // child maps too: parent and child take the peer's unread bytes from one queue, each byte going to
  // whichever reads it first, as from the socket. Closed with the last copy of the answer.
  std::shared_ptr<const int> shared_prefix;
  // kRelayed: the relay's eventfd, which rings when bytes come into the queue.
  std::shared_ptr<const int> relay_wake;
};

// The child's side: the answer's prefix becomes `prefix` (shared, or its bytes copied); false when it
// cannot be kept (no memory), and the bytes are lost to this process.
bool keep_answer_prefix(const HandBack& answer, TcpPrefix* prefix);

// What the outcome says, for log lines.
const char* to_string(HandBack::Outcome outcome) noexcept;
// A forked child's copy of a connection its parent's answer does not let it use: it fails loudly
// (unconnected sockets in its descriptors' places), reset first when bytes of it are lost here (the
// parent's move failed, or the bytes it handed over could not be kept).
void refuse_parents_copy(TrackedSocket* socket, int fd, HandBack::Outcome outcome) noexcept;

// After a fork: the child behind `channel` (this process's end of their fork channel) holds the
// connections `serials` (TrackedSocket::serial).
void lend_streams(int channel, const std::vector<uint64_t>& serials) noexcept;
// Whether a child that may still ask holds `serial`.
bool is_lent(uint64_t serial) noexcept;
// Whether the child behind `channel` holds it (a claim of anything else is refused).
bool is_lent_to(uint64_t serial, int channel) noexcept;
// Whether that child is the only one alive that holds it.
bool held_only_by(uint64_t serial, int channel) noexcept;
// The parent lets go of `serial` (its last descriptor is closed, it exits or execs): a claim waits for
// keep_handed_back from here on, instead of looking for the socket.
void note_handing_back(uint64_t serial) noexcept;
void keep_handed_back(uint64_t serial, HandBack answer) noexcept;
// For a child's claim of `serial`: the answer kept for it (waiting up to `wait_ms` while the hand-back
// is under way); nothing when this process has not let go of the connection (the caller moves it
// back itself). The peer's bytes in it go to the first caller only.
std::optional<HandBack> handed_back_for(uint64_t serial, int wait_ms) noexcept;
// `channel` answered the claim of `serial` (the child has what it needs).
void note_answered(uint64_t serial, int channel) noexcept;
// The child behind `channel` is gone: it holds nothing any more.
void forget_channel(int channel) noexcept;
// Every (channel, serial) whose answer is kept and that child has not claimed yet: at exit and exec,
// when this process can answer no more, each is sent unasked.
std::vector<std::pair<int, uint64_t>> unclaimed_hand_backs() noexcept;

// A child's claim moves back a connection this process still holds (the child behind `channel`;
// noted before the move, forgotten when the move fails). Once this process lets go of it too
// (note_let_go), having not forked or spawned while it held a descriptor of it, and while no other
// child holds it, that child holds it alone, and is told so when it asks (claimed_alone_by).
void note_claimed(uint64_t serial, int channel) noexcept;
void forget_claimed(uint64_t serial) noexcept;
// Before a fork or a spawn (registry/fork_share.h, note_forking): the claimed connections this
// process has a descriptor of are the new process's too.
void note_forking_with_claims() noexcept;
// This process's last descriptor of `serial` is gone, or it leaves (exit, an exec that keeps none).
void note_let_go(uint64_t serial) noexcept;
// At exit (`survives` null) and exec: note_let_go for every claimed connection this process still
// has, but those the new program keeps. Nothing to walk when no child claimed one.
void let_go_of_claims(bool (*survives)(const TrackedSocket*)) noexcept;
bool claimed_alone_by(uint64_t serial, int channel) noexcept;
// Every (channel, serial) so let go of: at exit and exec each child is told unasked, since this
// process can answer no more.
std::vector<std::pair<int, uint64_t>> claims_let_go() noexcept;

// The parent's end of a lent connection whose last descriptor is gone: moves the stream back to TCP
// (up to its timeout) and keeps the answer for the children; then the stream only disconnects
// (close) or, when the move failed, is aborted. The caller deletes it.
void hand_back(transport::RdmaStream* stream, uint64_t serial) noexcept;

// In a forked child: the parent's lendings are not its own.
void lent_streams_after_fork() noexcept;

}  // namespace tcp2rdma::preload
