// TCP_CORK on a connection on RDMA: the stream holds corked writes itself (transport/stream_held.cpp),
// so the kernel socket, which carries no byte meanwhile, need not be told at every cork and uncork
// (nginx with tcp_nopush sets it twice a request: two system calls that bought nothing). The
// application's setting is kept on the socket and given to the kernel when the connection is back
// on TCP (mark_connection_back_on_tcp); getsockopt reads it back as set.
#pragma once

#include <sys/socket.h>

namespace tcp2rdma::preload {

// setsockopt(fd, level, name, value, len) is TCP_CORK on a connection on RDMA: taken here (an
// uncork pushes what the stream held). False: the kernel's call, as for every other option.
bool cork_on_rdma(int fd, int level, int name, const void* value, socklen_t len) noexcept;
// getsockopt of TCP_CORK on a connection whose kernel socket was not told: answered from the
// application's setting, as the kernel would (an int, at most *len bytes of it). False otherwise.
bool cork_as_set(int fd, int level, int name, void* value, socklen_t* len) noexcept;

}  // namespace tcp2rdma::preload
