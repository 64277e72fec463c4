// One status for everything the transport reports; the preload layer maps it to errno in one place.
#pragma once

#include "wire.h"

namespace tcp2rdma::transport {

enum class Status {
  kOk,
  kWouldBlock,     // non-blocking call, nothing could be done now
  kNoDevice,       // no RDMA device, or none for this address
  kNoRoute,        // rdma_cm could not resolve the address or route
  kMemoryLock,     // ibv_reg_mr failed: RLIMIT_MEMLOCK
  kResources,      // CQ, QP or channel creation failed
  kRejected,       // the peer refused the connection (no listener, or not a tcp2rdma peer)
  kTimeout,
  kReset,          // the connection failed or the peer aborted
  kProtocolError,  // the peer broke the protocol; the connection was aborted
  kShutDown,       // write after shutdown_write() or close()
  kInvalid,        // bad options or arguments
  kAddressInUse,   // a listener: another rdma_cm listener holds the port (for this address, or one
                   // overlapping it)
  kInterrupted,    // a blocking read or write slept and a signal handler ran before anything moved
  kMovedToTcp,     // read or write: this direction of the connection goes on on its TCP socket
  kDescriptors,    // no descriptor left above the application's RLIMIT_NOFILE (own_descriptors.h)
  kRefused,        // the peer asked for more than our options allow (its ring): it is not served
  kPathFailed,     // (a fail_over stream) the RDMA path failed: the connection goes on over TCP once it
                   // has failed over (leave_path), or is reset if it cannot (give_up_path)
  kPinLimit,       // not even the smallest ring fits what the process may still pin (pin_budget.h)
};

const char* to_string(Status status);
// What the client's log says of a server's Decline (wire.h), e.g. "the peer declined: ...".
const char* to_string(DeclineReason reason);

// What a failed ibv_reg_mr means, from its errno: RLIMIT_MEMLOCK (ENOMEM, EPERM) or other resources.
Status registration_failure(int error);

// Whether this process's RLIMIT_MEMLOCK is too small for any stream (32 KiB or less, not root).
// libibverbs writes a warning on the application's standard error when such a process first touches
// it; the transport says kMemoryLock before touching it, so the application's output stays its own.
bool memlock_holds_no_stream();

}  // namespace tcp2rdma::transport
