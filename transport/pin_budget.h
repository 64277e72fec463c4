// What a new stream may pin, so that its ring is made smaller instead of failing to register, or
// instead of pinning more memory than the machine has (docs/protocol.md, "Pinned memory"). Every byte
// a stream registers is pinned: its receive ring and mailbox page, its bounce buffer (as large as the
// peer's ring) and its outgoing mailbox slots. With 1 MiB rings that is 2.1 MiB a stream: Debian's
// default RLIMIT_MEMLOCK of 8 MiB held three, and 500 connections of a root process would pin more
// than the 1 GiB of a test VM (its application killed by the OOM killer).
//
// A process's pinning limit is the smaller of its RLIMIT_MEMLOCK (unless it has CAP_IPC_LOCK, which
// lifts it) and a quarter of the machine's memory. A stream wants the ring its options say; it gets the
// largest power of two, not above that and not below 16 KiB, whose cost fits both (a) what is left:
// the limit less a sixteenth kept free, less what the process has pinned (the kernel's count, VmPin,
// which also sees zero-copy registrations and any queue memory the device pins) and what streams
// being set up have reserved, and no more than the machine has available less an eighth of its memory;
// and (b) a sixty-fourth of the limit, so that the first streams leave room for many more (8 MiB: 32
// KiB rings, about 90 of them; 1 GiB of memory: 1 MiB rings, about 110, then smaller ones). When no
// size fits (b), the smallest ring if it fits (a). A stream for which nothing fits is refused
// (kPinLimit) before anything is registered: the connection stays TCP.
#pragma once

#include <cstdint>

#include "status.h"

namespace tcp2rdma::transport {

inline constexpr uint32_t kSmallestBudgetRingLog2 = 14;  // 16 KiB
// The first ring of a stream whose ring grows, in a crowded process (crowded_first_ring_log2).
inline constexpr uint32_t kCrowdRingLog2 = 13;  // 8 KiB

// The process's limit and what counts against it now.
struct PinState {
  bool limited = false;   // false: nothing known bounds it (no /proc, no RLIMIT_MEMLOCK)
  uint64_t limit = 0;     // bytes the process may pin
  uint64_t pinned = 0;    // pinned now (VmPin) plus what setups under way have reserved
  uint64_t available = ~uint64_t{0};  // what the machine can still give (MemAvailable less a reserve)
};

// Bytes a stream pins besides its ring and the peer's (its bounce buffer): the mailbox page after the
// ring and the outgoing mailbox slots of a send queue this deep.
uint64_t stream_fixed_pin(uint32_t send_queue_depth);

// Pure (host tests): the ring (log2) for a stream that wants 2^wanted, whose peer's ring is
// 2^peer_log2, with `fixed` bytes besides the two rings. 0 when not even the smallest ring fits.
uint32_t ring_log2_within(uint32_t wanted, uint32_t peer_log2, uint64_t fixed, const PinState& state);

// Pure: the first ring (log2) of a stream whose ring grows later (a rule's buffer_size above its
// start): `wanted`, or kCrowdRingLog2 once the process has pinned an eighth of its limit. Then the
// connections already there keep their rings, and the later ones start at 8 KiB (20 KiB a connection
// with its mailbox page and the peer's mirror, instead of 132 KiB at 64 KiB), so that pinned memory
// follows the bytes in flight rather than the connection count: a ring that carries bulk grows from
// the first time the peer fills it, as before, while the growth budget allows. 10 000 connections in
// a 1 GiB machine (a 256 MiB limit) fit, where 64 KiB first rings refused the last 3000
// (docs/benchmarks.md). Rings that never grow keep `wanted`: they could never get it back.
uint32_t crowded_first_ring_log2(uint32_t wanted, const PinState& state);
// Pure: whether a finished channel's registered memory may be kept for its link's next channel (the
// link's pool, stream_link.h): only while the process is not crowded (it has pinned less than an
// eighth of its limit, crowded_first_ring_log2's line), so that memory kept for later never stands in
// the way of a new connection's ring.
bool spares_welcome(const PinState& state);
// spares_welcome as of the latest reservation's look at the process (no system call).
bool pin_room_for_spares();

// Pure: the largest ring (log2, at most `wanted`) a stream may grow to, or the mirror a writer may pin
// for a peer's grown ring: within a 64th of the limit, as a first ring, but leaving a quarter of the
// limit free instead of a sixteenth, for the first rings of the connections to come (grown rings
// shrink only when idle: without the reserve the first connections' grown rings took the whole
// budget, and later connections could not pin even a first ring; docs/benchmarks.md, bench-links at
// 1000).
// 0 when not even the smallest ring fits.
uint32_t growth_log2_within(uint32_t wanted, const PinState& state);

// The client's choice: it does not know the server's ring yet, and tells the server the largest it
// will mirror (ConnectRequest::max_server_ring_log2). It keeps its options (its ring, the server's up
// to max_peer_log2) when they fit; otherwise it takes the ring that fits with the server's no larger
// than its own, and asks the server for that.
struct RingChoice {
  uint32_t ring_log2 = 0;      // 0: nothing fits
  uint32_t max_peer_log2 = 0;  // the largest ring of the peer's this side mirrors
};
RingChoice client_rings(uint32_t wanted, uint32_t max_peer_log2, uint64_t fixed, const PinState& state);

// Reads the process's state (RLIMIT_MEMLOCK; /proc/self/status: VmPin, CapEff; /proc/meminfo), makes
// the choice, and reserves what it costs until the stream's registrations are made (then VmPin counts
// them), so that setups in several threads at once do not all take the same room (each choice is made
// against the reservations of the others at the moment its own is added). Lock-free, so that fork
// cannot leave it held: a forked child may inherit a reservation its parent's thread was holding,
// which only makes the child more careful.
class PinReservation {
 public:
  // The server's view: the peer's ring is known. `grows`: the ring grows later, so that a crowded
  // process starts it small (crowded_first_ring_log2).
  PinReservation(uint32_t wanted, uint32_t peer_log2, uint64_t fixed, bool grows = false);
  // The client's view (client_rings). With `grows`, a crowded client also asks the server to start no
  // larger than its own small ring: the mirror of the server's ring is pinned here.
  static PinReservation for_client(uint32_t wanted, uint32_t max_peer_log2, uint64_t fixed, bool grows = false);
  // A grown ring, or the mirror of a peer's (growth_log2_within): nothing else is pinned with it.
  static PinReservation for_growth(uint32_t wanted);
  ~PinReservation();
  PinReservation(PinReservation&& other) noexcept : choice_(other.choice_), reserved_(other.reserved_) {
    other.reserved_ = 0;
  }
  PinReservation(const PinReservation&) = delete;
  PinReservation& operator=(const PinReservation&) = delete;
  PinReservation& operator=(PinReservation&&) = delete;

  const RingChoice& choice() const { return choice_; }
  // Part of what was reserved is registered now (VmPin counts it): keep only `bytes` reserved, for
  // what is still to be registered. A client waits for the server's reply (up to its timeout) between
  // registering its ring and the bounce buffer: counting its ring twice meanwhile would make
  // concurrent setups refuse streams that fit.
  void shrink_to(uint64_t bytes);

 private:
  PinReservation() = default;
  // Chooses with `choose` against the state and the others' reservations, and adds its own.
  template <typename Choose>
  void reserve(uint64_t fixed, Choose choose);

  RingChoice choice_;
  uint64_t reserved_ = 0;
};

}  // namespace tcp2rdma::transport
