// RLIMIT_NOFILE as the application set it. The module places each descriptor of its own above the
// application's soft limit by raising that limit for a moment (transport/own_descriptors.h); the
// application's own calls on RLIMIT_NOFILE wait for such a moment to pass, so that getrlimit never
// reads the raised value and a setrlimit is never undone by the module putting its limit back. The
// module's windows read the limit afresh each time: they follow whatever the application set last.
// Other resources, and prlimit on another process, go straight through.
#include <sys/resource.h>
#include <unistd.h>

#include <mutex>

#include "libc/interposed.h"
#include "own_descriptors.h"

using tcp2rdma::preload::real;

namespace {

// The window's lock when the call is about this process's descriptor limit, else none.
std::unique_lock<std::mutex> hold_if_descriptors(__rlimit_resource_t resource, pid_t pid = 0) {
  if (resource != RLIMIT_NOFILE || (pid != 0 && pid != getpid())) return {};
  return tcp2rdma::transport::hold_descriptor_limit();
}

}  // namespace

T2R_INTERPOSE int getrlimit(__rlimit_resource_t resource, struct rlimit* limit) {
  auto hold = hold_if_descriptors(resource);
  return real().getrlimit(resource, limit);
}

T2R_INTERPOSE int setrlimit(__rlimit_resource_t resource, const struct rlimit* limit) {
  auto hold = hold_if_descriptors(resource);
  return real().setrlimit(resource, limit);
}

T2R_INTERPOSE int getrlimit64(__rlimit_resource_t resource, struct rlimit64* limit) {
  auto hold = hold_if_descriptors(resource);
  return real().getrlimit64(resource, limit);
}

T2R_INTERPOSE int setrlimit64(__rlimit_resource_t resource, const struct rlimit64* limit) {
  auto hold = hold_if_descriptors(resource);
  return real().setrlimit64(resource, limit);
}

T2R_INTERPOSE int prlimit(pid_t pid, enum __rlimit_resource resource, const struct rlimit* new_limit,
                          struct rlimit* old_limit) {
  auto hold = hold_if_descriptors(resource, pid);
  return real().prlimit(pid, resource, new_limit, old_limit);
}

T2R_INTERPOSE int prlimit64(pid_t pid, enum __rlimit_resource resource, const struct rlimit64* new_limit,
                            struct rlimit64* old_limit) {
  auto hold = hold_if_descriptors(resource, pid);
  return real().prlimit64(pid, resource, new_limit, old_limit);
}
