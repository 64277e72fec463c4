// Whose a verbs or rdma_cm resource is: the process that made it, under the credentials it had then.
//
// The kernel runs a write() on an RDMA character device (every rdma_cm command; rxe's send doorbell)
// only for the credentials that opened it (ib_safe_file_access: the very same cred object), and a
// forked child, or a process after setuid and the like, has another. Resources made in one epoch are
// therefore never used to make anything in a later one: device contexts, links and listeners are made
// anew, lazily, by the process and under the credentials that use them (docs/architecture.md,
// "Credentials").
#pragma once

#include <sys/types.h>

namespace tcp2rdma::transport {

struct Epoch {
  pid_t pid = 0;
  unsigned credentials = 0;  // how many credential changes this process has made
  bool operator==(const Epoch&) const = default;
};

// This process, under its credentials now.
Epoch current_epoch() noexcept;

// After a change of this process's user, groups or capabilities: resources made before it are of an
// older epoch from now on.
void note_credentials_changed() noexcept;

}  // namespace tcp2rdma::transport
