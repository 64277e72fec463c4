// keep_forever(p): memory this process lets go of without freeing, on purpose. A forked child holds
// copies of its parent's streams and listeners (destroying them would end the parent's connections:
// they share the rdma_cm descriptors) and replaces locks another thread of the parent may have held.
// LeakSanitizer is told, so that a leak report from a sanitized run always means a real leak.
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

namespace tcp2rdma::transport {

template <class T>
T* keep_forever(T* p) noexcept {
#if defined(__SANITIZE_ADDRESS__)
  if (p != nullptr) __lsan_ignore_object(p);  // and what it points to: ignored objects are roots
#endif
  return p;
}

}  // namespace tcp2rdma::transport
