// The client's links, by the server address they were made to (docs/links.md): a later stream to the
// same address opens a channel on a live link instead of making a queue pair. Process-wide; a forked
// child starts with none (its parent's links are not its to use). The table holds each link: one
// without channels lingers 2 s for the next stream, then goes (and its queue pair is disconnected).
#pragma once

#include <sys/socket.h>

#include <memory>

namespace tcp2rdma::transport {

class StreamLink;

// A live link to `address` with room for a channel of `receives` receives, or nullptr.
std::shared_ptr<StreamLink> find_link(const sockaddr* address, int receives);
// Remembers `link` as one to `address`.
void remember_link(const sockaddr* address, const std::shared_ptr<StreamLink>& link);

}  // namespace tcp2rdma::transport
