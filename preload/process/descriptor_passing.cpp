#include "process/descriptor_passing.h"

#include <sys/socket.h>

#include <cstdio>
#include <cstring>

#include "back_to_tcp/move_back.h"
#include "libc/real_calls.h"
#include "process/deferred_upgrade.h"
#include "process/exec_guard.h"
#include "process/fork_service.h"
#include "rdma_stream.h"
#include "registry/connection_path.h"
#include "registry/socket_registry.h"
#include "registry/tracked_socket.h"
#include "registry/upgrade_session.h"
#include "util/log.h"
#include "util/saved_errno.h"

namespace tcp2rdma::preload {
namespace {

constexpr char kWhy[] = "it is passed to another process";

// The receiver's copy fails loudly, and so does the peer (exec_guard.h, reset_and_disown).
void reset_before_passing(TrackedSocket* socket, int fd, const char* why) {
  log_always("%s: reset as %s: %s", connection_label(socket), kWhy, why);
  reset_and_disown(socket, fd);
}

// One descriptor the message carries: the connection onto its kernel socket, whole, or reset.
void pass(int fd) {
  SocketHold socket = SocketHold::of(fd);
  if (!socket || (socket->role() != SocketRole::kClient && socket->role() != SocketRole::kServer)) return;
  socket->forks.note_passed();  // first: no return to RDMA starts from here on
  if (socket->stream_of_parent()) claim_from_parent(socket.get(), fd);
  give_up_deferred_upgrade(socket.get(), fd, "the process passes it to another process before the upgrade");
  settle_session(fd, "the process passes it to another process before the upgrade");
  if (transport::RdmaStream* s = socket->stream()) {
    const char* stays = !socket->follows_fork.load(std::memory_order_relaxed) ? "its rule says on_fork: parent"
                        : !move_back(socket.get(), s, fd, kWhy)              ? "the peer did not answer the move to tcp"
                                                                             : nullptr;
    if (stays != nullptr) {
      (void)s->flush();  // what was written still reaches the peer, then the reset
      s->abort();
      reset_before_passing(socket.get(), fd, stays);
      return;
    }
  }
  if (socket->prefix.present()) {
    // The peer's bytes that came on the stream and were not read here: the receiver reads the kernel's
    // socket only, and would read on past them.
    char why[96];
    std::snprintf(why, sizeof why, "%zu bytes of the peer's came on rdma and are unread here", socket->prefix.size());
    reset_before_passing(socket.get(), fd, why);
  }
}

}  // namespace

void before_passing_descriptors(int via, const msghdr* msg) noexcept {
  if (msg == nullptr || msg->msg_control == nullptr || msg->msg_controllen < sizeof(cmsghdr)) return;
  SavedErrno keep_errno;
  auto* hdr = const_cast<msghdr*>(msg);  // CMSG_NXTHDR takes a non-const header; nothing is written
  bool via_unix = false, asked = false;
  for (cmsghdr* c = CMSG_FIRSTHDR(hdr); c != nullptr; c = CMSG_NXTHDR(hdr, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS || c->cmsg_len < CMSG_LEN(0)) continue;
    size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd = -1;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      if (fd < 0 || !SocketHold::of(fd)) continue;
      if (!asked) {
        // Only a unix socket carries descriptors; the kernel refuses the message anywhere else, and
        // then nothing must have moved.
        int domain = 0;
        socklen_t len = sizeof domain;
        via_unix = real().getsockopt(via, SOL_SOCKET, SO_DOMAIN, &domain, &len) == 0 && domain == AF_UNIX;
        asked = true;
      }
      if (!via_unix) return;
      pass(fd);
    }
  }
}

}  // namespace tcp2rdma::preload
