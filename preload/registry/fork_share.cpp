#include "registry/fork_share.h"

#include "registry/lent_streams.h"
#include "registry/tracked_socket.h"

namespace tcp2rdma::preload {
namespace {
// Forks and spawns this process (and its ancestors, in a child) made: a socket made before the latest
// one may be held by another process too.
std::atomic<uint64_t> g_forks{0};
// Sockets made: a socket's birth tells it from a later one made at the same address.
std::atomic<uint64_t> g_births{0};
}  // namespace

void note_forking() noexcept {
  g_forks.fetch_add(1, std::memory_order_relaxed);
  note_forking_with_claims();  // lent_streams.h: a connection a child claimed is the new one's too
}

uint64_t forks_so_far() noexcept { return g_forks.load(std::memory_order_relaxed); }

ForkShare::ForkShare() noexcept
    : forks_at_birth_(g_forks.load(std::memory_order_relaxed)),
      birth_(g_births.fetch_add(1, std::memory_order_relaxed) + 1) {}

ForkShare::~ForkShare() {
  if (TrackedSocket* listener = return_listener_.load()) listener->release();
}

bool ForkShare::shared() const noexcept {
  if (passed_.load(std::memory_order_relaxed)) return true;
  uint64_t forks = g_forks.load(std::memory_order_relaxed);
  bool since_birth = forks != forks_at_birth_ || inherited_.load(std::memory_order_relaxed);
  return since_birth && forks != alone_at_forks_.load(std::memory_order_relaxed);
}

void ForkShare::note_alone() noexcept {
  alone_at_forks_.store(g_forks.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

void ForkShare::note_claimed_while_held() noexcept {
  claimed_at_forks_.store(g_forks.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

bool ForkShare::awaits_parents_word() const noexcept {
  return claimed_at_forks_.load(std::memory_order_relaxed) == g_forks.load(std::memory_order_relaxed);
}

void ForkShare::note_accepted_from(const TrackedSocket* listener) noexcept {
  accepted_from_ = listener;
  accepted_from_birth_ = listener->forks.birth_;
}

bool ForkShare::accepted_from(const TrackedSocket* candidate) const noexcept {
  return candidate == accepted_from_ && candidate->forks.birth_ == accepted_from_birth_;
}

void ForkShare::keep_return_listener(TrackedSocket* listener) noexcept {
  if (listener == nullptr) return;
  listener->add_ref();
  if (TrackedSocket* before = return_listener_.exchange(listener, std::memory_order_acq_rel)) before->release();
}

void note_sockets_made_before_fork(pid_t parent) noexcept {
  for_each_tracked_fd([parent](int, SocketHold& socket) {
    pid_t none = 0;
    socket->forks.creator_.compare_exchange_strong(none, parent, std::memory_order_relaxed);
  });
}

SocketHold ForkShare::return_listener() const noexcept {
  // Released only by the destructor: a caller that holds the connection's socket finds it alive.
  return SocketHold(return_listener_.load(std::memory_order_acquire));
}

}  // namespace tcp2rdma::preload
