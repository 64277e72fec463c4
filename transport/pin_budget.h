// What a new stream may pin, so that under a small RLIMIT_MEMLOCK (an unprivileged user: Debian's
// default is 8 MiB) its ring is made smaller instead of failing to register (docs/protocol.md, "Memory
// lock limit"). Every byte a stream registers counts against the limit: its receive ring and mailbox
// page, its bounce buffer (as large as the peer's ring) and its outgoing mailbox slots. With a
// process's first streams taking a 1 MiB ring each, 8 MiB held three of them.
//
// The rule, for a limited process: a stream wants the ring its options say; it gets the largest power
// of two, not above that and not below 16 KiB, whose cost fits both (a) what is left of the limit
// after what the process has pinned (the kernel's count, VmPin, which also sees zero-copy
// registrations and any queue memory the device pins) and what streams being set up have reserved,
// less a sixteenth of the limit kept free, and (b) a sixty-fourth of the limit, so that the first
// streams leave room for many more (8 MiB: 32 KiB rings, about 90 of them). A stream for which not even
// the smallest ring fits is refused (kMemoryLock) before anything is registered. A process with
// CAP_IPC_LOCK, or an unlimited RLIMIT_MEMLOCK, keeps the rings its options ask for.
#pragma once

#include <cstdint>

#include "status.h"

namespace tcp2rdma::transport {

inline constexpr uint32_t kSmallestBudgetRingLog2 = 14;  // 16 KiB

// The process's limit and what counts against it now.
struct PinState {
  bool limited = false;  // false: CAP_IPC_LOCK or RLIMIT_MEMLOCK unlimited
  uint64_t limit = 0;    // RLIMIT_MEMLOCK (soft), bytes
  uint64_t pinned = 0;   // pinned now (VmPin) plus what setups under way have reserved
};

// Bytes a stream pins besides its ring and the peer's (its bounce buffer): the mailbox page after the
// ring and the outgoing mailbox slots of a send queue this deep.
uint64_t stream_fixed_pin(uint32_t send_queue_depth);

// Pure (host tests): the ring (log2) for a stream that wants 2^wanted, with `fixed` bytes besides its
// ring and the peer's. peer_log2 is the peer's ring when known (the server's view of a request), or
// 0: not known yet (the client's), taken as no larger than ours, which the request asks the peer to
// keep to. 0 when not even the smallest ring fits. Unlimited: `wanted`.
uint32_t ring_log2_within(uint32_t wanted, uint32_t peer_log2, uint64_t fixed, const PinState& state);

// Reads the process's state (RLIMIT_MEMLOCK, /proc/self/status: VmPin, CapEff) and reserves what the
// chosen ring costs until the stream's registrations are made (then VmPin counts them), so that
// setups in several threads at once do not all take the same room (each choice is made against the
// reservations of the others at the moment its own is added). Lock-free, so that fork cannot leave it
// held: a forked child may inherit a reservation its parent's thread was holding, which only makes the
// child more careful.
class PinReservation {
 public:
  // Chooses as ring_log2_within does and reserves its cost; *ring_log2 is 0 when nothing fits
  // (nothing is reserved then).
  PinReservation(uint32_t wanted, uint32_t peer_log2, uint64_t fixed, uint32_t* ring_log2);
  ~PinReservation();
  PinReservation(const PinReservation&) = delete;
  PinReservation& operator=(const PinReservation&) = delete;
  // Whether the process is limited at all (the request then asks the peer to keep its ring to ours).
  bool limited() const { return limited_; }

 private:
  uint64_t reserved_ = 0;
  bool limited_ = false;
};

}  // namespace tcp2rdma::transport
