// The path watcher's second duty: a message that a write left held on a stream (TCP_CORK, MSG_MORE;
// transport/stream_held.cpp) goes within 200 ms even when the application never says that nothing
// more follows, as the kernel sends a corked segment after 200 ms. The application's own uncork, its
// next write without the cork and any wait on the stream push it sooner.
//
// Why the watcher: an application that corks, writes a request and then waits in a call the module
// does not see (a futex, a sleep, another program's pipe) has no call of its own that could push it.
// The list is by serial, so a socket closed meanwhile is simply gone; a listed socket costs its
// writes one atomic exchange (TrackedSocket::held_listed_by), and only a watcher that has not
// ticked for a second is woken.
#include <sys/eventfd.h>

#include <algorithm>
#include <mutex>
#include <vector>

#include "back_to_tcp/path_watcher.h"
#include "back_to_tcp/watcher_state.h"
#include "rdma_stream.h"
#include "registry/connection_path.h"
#include "registry/tracked_socket.h"

namespace tcp2rdma::preload::watcher {

int age_held(Watcher* w) {
  auto now = Clock::now();
  {
    std::lock_guard lock(w->mutex);
    if (!w->held_ticking) return -1;
    if (now - w->held_aged < kHeldTick) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(kHeldTick - (now - w->held_aged));
      return static_cast<int>(left.count()) + 1;
    }
  }
  w->held_aged = now;
  std::vector<uint64_t> listed;
  {
    std::lock_guard lock(w->mutex);
    listed.swap(w->held);
  }
  std::vector<uint64_t> still;
  for (uint64_t serial : listed) {
    SocketHold socket = SocketHold::live(serial);
    if (!socket) continue;
    // Unlisted before the look: a write that holds again after it lists the socket anew.
    socket->held_listed_by.store(0);
    transport::RdmaStream* stream = socket->path_is(Path::kRdma) ? socket->own_stream() : nullptr;
    if (stream != nullptr && stream->push_if_aged() && socket->held_listed_by.exchange(w->generation) != w->generation) {
      still.push_back(serial);
    }
  }
  std::lock_guard lock(w->mutex);
  w->held.insert(w->held.end(), still.begin(), still.end());
  // Ticking goes on a while after the last held message: an application that corks every request
  // (nginx) would otherwise wake the watcher at most of them, a system call each.
  w->held_idle_ticks = w->held.empty() ? w->held_idle_ticks + 1 : 0;
  w->held_ticking = w->held_idle_ticks < kHeldIdleTicks;
  return w->held_ticking ? static_cast<int>(kHeldTick.count()) : -1;
}

}  // namespace tcp2rdma::preload::watcher
