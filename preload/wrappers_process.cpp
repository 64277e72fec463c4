// Processes. The child of fork() inherits the descriptors and, as a copy of this memory, the fd table
// that describes them, which stays true for sockets that have not moved to RDMA.
#include "interposed.h"

using tcp2rdma::preload::real;

T2R_INTERPOSE pid_t fork(void) { return real().fork(); }

// vfork's child borrows the parent's stack until it execs or exits, so a wrapper cannot return to it
// safely: a wrapper frame would be popped by the child and then reused by the parent. POSIX allows
// vfork to be fork, and fork is what the module gives.
T2R_INTERPOSE pid_t vfork(void) { return fork(); }
