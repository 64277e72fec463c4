// The transport's own system calls, and those librdmacm and libibverbs make for it, on descriptors the
// application never sees: event channels, eventfds, epoll sets, the device's command descriptor.
//
// In libtcp2rdma.so every one of those calls (read, write, poll, close, epoll_ctl ...) reaches the
// module's wrappers first, since the module interposes them for the whole process, librdmacm included.
// A wrapper that took such a descriptor for an application's connection would send the library's
// commands down that connection's stream as if the application had written them: seen once, as 56
// bytes of rdma_cm commands (MIGRATE_ID, SET_OPTION) at the end of another connection's stream, when a
// new event channel got the number of a socket the application was just closing. So while a thread
// runs inside the transport, the wrappers pass every call straight to libc (OwnCalls::active()).
#pragma once

namespace tcp2rdma::transport {

// Marks the calling thread as inside the transport for its lifetime; nests.
class OwnCalls {
 public:
  OwnCalls() noexcept { ++depth_; }
  ~OwnCalls() { --depth_; }
  OwnCalls(const OwnCalls&) = delete;
  OwnCalls& operator=(const OwnCalls&) = delete;

  static bool active() noexcept { return depth_ > 0; }

 private:
  // initial-exec: the module is loaded at process start (LD_PRELOAD), so its TLS is static and the
  // check is one load, not a call to __tls_get_addr.
  static inline thread_local int depth_ [[gnu::tls_model("initial-exec")]] = 0;
};

}  // namespace tcp2rdma::transport
