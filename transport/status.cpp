#include "status.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>

#include "os_calls.h"

namespace tcp2rdma::transport {

const char* to_string(Status status) {
  switch (status) {
    case Status::kOk: return "ok";
    case Status::kWouldBlock: return "would block";
    case Status::kNoDevice: return "no RDMA device";
    case Status::kNoRoute: return "no route to the peer over RDMA";
    case Status::kMemoryLock: return "cannot register memory (RLIMIT_MEMLOCK)";
    case Status::kResources: return "cannot create RDMA resources";
    case Status::kRejected: return "rejected by the peer";
    case Status::kTimeout: return "timed out";
    case Status::kReset: return "connection reset";
    case Status::kProtocolError: return "protocol violation by the peer";
    case Status::kShutDown: return "the stream is shut down for writing";
    case Status::kInvalid: return "invalid argument";
    case Status::kAddressInUse: return "the RDMA port is taken";
    case Status::kInterrupted: return "interrupted by a signal";
    case Status::kMovedToTcp: return "moved back to TCP";
    case Status::kRefused: return "the peer asked for a larger ring than this side allows";
    case Status::kPathFailed: return "the RDMA path failed (failing over to TCP)";
    case Status::kDescriptors: return "no descriptor left above the application's limit (RLIMIT_NOFILE)";
    case Status::kPinLimit:
      return "no room to pin another ring (the process's pinning limit: RLIMIT_MEMLOCK or a quarter of memory)";
  }
  return "?";
}

const char* to_string(DeclineReason reason) {
  switch (reason) {
    case DeclineReason::kNone: return "the peer has no tcp2rdma listener on that port (rejected; its log says why)";
    case DeclineReason::kServerStaysTcp: return "the peer declined: it keeps the connection on TCP";
    case DeclineReason::kBusy: return "the peer declined: too many upgrades under way in its process";
    case DeclineReason::kExpired: return "the peer declined: its application did not accept the connection in time";
    case DeclineReason::kTooLate: return "the peer declined: its upgrade had stopped waiting for our request";
    case DeclineReason::kDuplicate: return "the peer declined: two requests named this connection";
    case DeclineReason::kRingTooLarge: return "the peer declined: our ring is larger than it mirrors";
    case DeclineReason::kPinLimit: return "the peer declined: it has no room to pin another ring";
    case DeclineReason::kMemoryLock: return "the peer declined: it cannot register memory (RLIMIT_MEMLOCK)";
    case DeclineReason::kResources: return "the peer declined: it cannot make RDMA resources";
  }
  return "the peer declined";
}

Status registration_failure(int error) {
  return error == ENOMEM || error == EPERM ? Status::kMemoryLock : Status::kResources;
}

bool memlock_holds_no_stream() {
  rlimit limit{};
  if (geteuid() == 0 || os().getrlimit(RLIMIT_MEMLOCK, &limit) != 0) return false;
  return limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur <= 32 * 1024;
}

}  // namespace tcp2rdma::transport
