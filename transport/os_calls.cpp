#include "os_calls.h"

#include <dlfcn.h>

#include <cstdlib>

namespace tcp2rdma::transport {
namespace {

template <typename Fn>
void resolve(Fn& slot, const char* name) {
  slot = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
  // Every libc has these: a missing one means a broken process, where carrying on would crash later
  // at a null call with no word of why.
  if (slot == nullptr) std::abort();
}

OsCalls resolve_all() noexcept {
  OsCalls calls{};
  resolve(calls.close, "close");
  resolve(calls.fcntl, "fcntl");
  resolve(calls.poll, "poll");
  resolve(calls.epoll_create1, "epoll_create1");
  resolve(calls.epoll_ctl, "epoll_ctl");
  resolve(calls.epoll_wait, "epoll_wait");
  resolve(calls.getrlimit, "getrlimit");
  resolve(calls.setrlimit, "setrlimit");
  return calls;
}

// Resolved at load as well, so that no stream's first use pays for dlsym.
[[gnu::constructor]] void resolve_at_load() { (void)os(); }

}  // namespace

const OsCalls& os() noexcept {
  static const OsCalls calls = resolve_all();
  return calls;
}

}  // namespace tcp2rdma::transport
