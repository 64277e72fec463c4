// libibverbs and librdmacm, opened when the transport first needs them rather than when the module is
// loaded.
//
// Every process an LD_PRELOAD reaches loads the module: shells, cat, grep, a build's compilers, most of
// which never make a connection. Linked as ordinary dependencies, the two libraries and theirs (libnl's
// two) cost each of those processes about 1.8 ms natively at exec (a third of the module's whole
// start-up cost; tens of times that under emulation) and could not start at all on a machine without
// rdma-core. Instead the transport calls forwarders of its own (rdma_library_calls.def), hidden from
// the application, which open both libraries on the first call and go to the real function from then
// on. A process that never puts a connection on RDMA never opens them.
#pragma once

#include <string>

namespace tcp2rdma::transport {

// Opens both libraries and resolves every function the transport calls, once per process (later calls
// return the first answer). False when either library or one of the functions is missing: every
// forwarder then fails as its function does when no device is there (nullptr or -1 with errno
// ENOSYS, or ENOSYS returned), and *why (when given) says what was missing.
bool rdma_libraries_loaded(std::string* why = nullptr);

// The forwarders' way in: the resolved function number `call` (rdma_library_calls.def's order), or
// nullptr when the libraries are not there.
void* resolved_function(int call);

}  // namespace tcp2rdma::transport
