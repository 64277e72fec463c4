// errno and the module's own calls. A wrapper's bookkeeping, and the module's own system calls on
// the way to an answer (a non-blocking look at an eventfd, an interrupted wait), must not show
// through errno: the application reads it after a successful call too (sockperf, for one, read a
// stale ECONNRESET after a successful recvfrom() and took it for the peer's end).
#pragma once

#include <cerrno>

namespace tcp2rdma::preload {

// Puts errno back as it was at construction, whatever happens in between.
class SavedErrno {
 public:
  SavedErrno() noexcept : saved_(errno) {}
  ~SavedErrno() { errno = saved_; }
  SavedErrno(const SavedErrno&) = delete;
  SavedErrno& operator=(const SavedErrno&) = delete;

 private:
  int saved_;
};

// Runs call(), which returns a count (or 0) on success and -1 with errno set on failure. On success
// errno is left as it was before, as the kernel's calls leave it; a failure's errno is the call's.
template <typename Call>
auto keeping_errno_on_success(Call&& call) noexcept {
  const int saved_errno = errno;
  auto result = call();
  if (result >= 0) errno = saved_errno;
  return result;
}

}  // namespace tcp2rdma::preload
