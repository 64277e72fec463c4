#include "status.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>

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

Status registration_failure(int error) {
  return error == ENOMEM || error == EPERM ? Status::kMemoryLock : Status::kResources;
}

bool memlock_holds_no_stream() {
  rlimit limit{};
  if (geteuid() == 0 || getrlimit(RLIMIT_MEMLOCK, &limit) != 0) return false;
  return limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur <= 32 * 1024;
}

}  // namespace tcp2rdma::transport
