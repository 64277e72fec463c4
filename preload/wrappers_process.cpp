// Processes. The child of fork() inherits the descriptors and, as a copy of this memory, the fd table
// that describes them, which stays true for sockets that have not moved to RDMA. A connection that
// has moved is the parent's: in the child it fails loudly (disown_parent_streams), never touching the
// parent's RDMA resources.
#include "interposed.h"
#include "tracked_socket.h"

using tcp2rdma::preload::real;

T2R_INTERPOSE pid_t fork(void) {
  pid_t pid = real().fork();
  if (pid == 0) {
    tcp2rdma::preload::note_forked_child();  // inherited streams and listeners are not ours to use
    tcp2rdma::preload::disown_parent_streams();
  }
  return pid;
}

// vfork's child borrows the parent's stack until it execs or exits, so a wrapper cannot return to it
// safely: a wrapper frame would be popped by the child and then reused by the parent. POSIX allows
// vfork to be fork, and fork is what the module gives.
T2R_INTERPOSE pid_t vfork(void) { return fork(); }
