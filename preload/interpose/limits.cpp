// RLIMIT_NOFILE as the application set it. The module places each descriptor of its own above the
// application's soft limit by raising that limit for a moment (transport/own_descriptors.h); the
// application's own calls on RLIMIT_NOFILE wait for such a moment to pass, so that getrlimit never
// reads the raised value and a setrlimit is never undone by the module putting its limit back. The
// module's windows read the limit afresh each time: they follow whatever the application set last.
// Other resources, and prlimit on another process, go straight through.
// Each wrapper makes the prlimit64 system call itself (what glibc's own functions do on x86-64), never
// through the table of real calls, and is left uninstrumented by the sanitizers: a sanitizer runtime
// calls getrlimit and setrlimit (RLIMIT_CORE, RLIMIT_STACK) while it starts, before its shadow memory
// exists and before anything of the process (dlsym, malloc) may be used.
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <mutex>

#include "libc/interposed.h"
#include "own_descriptors.h"

static_assert(sizeof(struct rlimit) == sizeof(struct rlimit64), "prlimit64 takes both (x86-64, 64-bit)");

// Nothing a sanitizer instruments runs on a call about another resource.
#define T2R_EARLY __attribute__((no_sanitize_address, no_sanitize_thread, no_sanitize_undefined))

namespace {

// The call about this process's descriptor limit, under the window's lock.
int descriptor_limit_call(const void* new_limit, void* old_limit) {
  auto hold = tcp2rdma::transport::hold_descriptor_limit();
  return static_cast<int>(syscall(SYS_prlimit64, 0, RLIMIT_NOFILE, new_limit, old_limit));
}

T2R_EARLY int prlimit_call(pid_t pid, int resource, const void* new_limit, void* old_limit) {
  if (resource == RLIMIT_NOFILE && (pid == 0 || pid == getpid())) return descriptor_limit_call(new_limit, old_limit);
  return static_cast<int>(syscall(SYS_prlimit64, pid, resource, new_limit, old_limit));
}

}  // namespace

T2R_INTERPOSE T2R_EARLY int getrlimit(__rlimit_resource_t resource, struct rlimit* limit) {
  return prlimit_call(0, resource, nullptr, limit);
}

T2R_INTERPOSE T2R_EARLY int setrlimit(__rlimit_resource_t resource, const struct rlimit* limit) {
  return prlimit_call(0, resource, limit, nullptr);
}

T2R_INTERPOSE T2R_EARLY int getrlimit64(__rlimit_resource_t resource, struct rlimit64* limit) {
  return prlimit_call(0, resource, nullptr, limit);
}

T2R_INTERPOSE T2R_EARLY int setrlimit64(__rlimit_resource_t resource, const struct rlimit64* limit) {
  return prlimit_call(0, resource, limit, nullptr);
}

T2R_INTERPOSE T2R_EARLY int prlimit(pid_t pid, enum __rlimit_resource resource, const struct rlimit* new_limit,
                                    struct rlimit* old_limit) {
  return prlimit_call(pid, resource, new_limit, old_limit);
}

T2R_INTERPOSE T2R_EARLY int prlimit64(pid_t pid, enum __rlimit_resource resource,
                                      const struct rlimit64* new_limit, struct rlimit64* old_limit) {
  return prlimit_call(pid, resource, new_limit, old_limit);
}
