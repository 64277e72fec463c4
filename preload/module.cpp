// The preload module's load-time hook: says the module is there when logging is on.
#include "log.h"

namespace {

// Runs in every process the module is preloaded into, before main().
[[gnu::constructor]] void announce_load() {
  if (tcp2rdma::preload::log_enabled()) tcp2rdma::preload::log_line("loaded");
}

}  // namespace
