// The preload module's load-time hook. Interception itself arrives with the preload issue; until
// then the module loads into any program and changes nothing, which tests/preload checks.
#include <cstdlib>
#include <cstring>
#include <unistd.h>

namespace {

// Runs in every process the module is preloaded into, before main(). It must not allocate through
// iostreams or throw: the application owns the process.
__attribute__((constructor)) void announce_load() {
  const char* log = std::getenv("TCP2RDMA_LOG");
  if (log == nullptr || *log == '\0' || std::strcmp(log, "0") == 0) return;
  static constexpr char kMsg[] = "tcp2rdma: loaded\n";
  ssize_t ignored = ::write(STDERR_FILENO, kMsg, sizeof kMsg - 1);
  (void)ignored;
}

}  // namespace
