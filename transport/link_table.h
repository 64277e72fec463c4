// The client's links, by the server address they were made to (docs/links.md): a later stream to the
// same address opens a channel on a live link instead of making a queue pair. Process-wide; a forked
// child starts with none (its parent's links are not its to use). The table holds each link: one
// without channels lingers 2 s for the next stream, then goes (and its queue pair is disconnected).
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <memory>

namespace tcp2rdma::transport {

class StreamLink;

// A live link to `address` with room for a channel whose rule says `depth` (at the depth that link
// would give it: StreamLink::channel_depth), or nullptr. While another
// thread of this process makes a link to `address`, waits for it first (up to `wait`, once): streams
// that start together to a new server share its first link instead of making one each. With nullptr,
// *making says whether the caller is now the one making the link: it then tells link_made() when it
// is done (remembered or failed); the others wait for it.
std::shared_ptr<StreamLink> find_link(const sockaddr* address, int depth, std::chrono::milliseconds wait,
                                      bool* making);
// Whether this process has a live link to `address`, without waiting: a stream to it would be a
// channel opened in one round trip.
bool linked_to(const sockaddr* address);
// The receives of the largest live link to `address` that is full for a channel whose rule says
// `depth`, or 0: the next link to it is then made for a crowd (StreamLink::size_for_crowd).
int crowded_to(const sockaddr* address, int depth);
// Remembers `link` as one to `address`.
void remember_link(const sockaddr* address, const std::shared_ptr<StreamLink>& link);
// Destroys every link without channels now: before a change of credentials, while the link's rdma_cm
// descriptor still takes its disconnect (credential_epoch.h).
void let_go_of_idle_links();
// The caller's making of a link to `address` (find_link) is over.
void link_made(const sockaddr* address);

}  // namespace tcp2rdma::transport
