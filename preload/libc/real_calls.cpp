#include "libc/real_calls.h"

#include "libc/interposed.h"

#include <dlfcn.h>

#include <atomic>

namespace tcp2rdma::preload {
namespace {

RealCalls g_real{};
std::atomic<bool> g_resolved{false};

template <typename Fn>
void resolve(Fn& slot, const char* name, Fn ours) {
  // RTLD_NEXT skips this module, so the result is never our own wrapper; checked anyway because a
  // wrapper that calls itself recurses until the stack is gone.
  auto* found = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
  slot = found == ours ? nullptr : found;
}

void resolve_all() {
#define T2R_CALL(ret, name, params) resolve(g_real.name, #name, static_cast<ret(*) params>(&::name));
#include "libc/intercepted_calls.def"
#undef T2R_CALL
  g_resolved.store(true, std::memory_order_release);
}

[[gnu::constructor]] void resolve_at_load() { resolve_all(); }

}  // namespace

const RealCalls& real() {
  if (!g_resolved.load(std::memory_order_acquire)) [[unlikely]] resolve_all();
  return g_real;
}

}  // namespace tcp2rdma::preload
