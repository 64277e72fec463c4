// Whose a resource is (credential_epoch.h).
#include "credential_epoch.h"

#include <unistd.h>

#include <atomic>

namespace tcp2rdma::transport {
namespace {

std::atomic<unsigned> g_credentials{0};  // copied into a forked child, whose pid differs anyway

}  // namespace

Epoch current_epoch() noexcept { return Epoch{getpid(), g_credentials.load(std::memory_order_acquire)}; }

void note_credentials_changed() noexcept { g_credentials.fetch_add(1, std::memory_order_acq_rel); }

}  // namespace tcp2rdma::transport
