#include "rdma_libraries.h"

#include <dlfcn.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include <cerrno>

#include "own_calls.h"

namespace tcp2rdma::transport {
namespace {

enum Library { kVerbs, kCm, kLibraries };
constexpr const char* kSonames[kLibraries] = {"libibverbs.so.1", "librdmacm.so.1"};

enum Call {
#define T2R_RDMA_CALL(library, version, type, name, parameters, arguments, failure) k_##name,
#include "rdma_library_calls.def"
#undef T2R_RDMA_CALL
  kCalls
};

struct Symbol {
  Library library;
  const char* version;
  const char* name;
};

constexpr Symbol kSymbols[kCalls] = {
#define T2R_RDMA_CALL(library, version, type, name, parameters, arguments, failure) {library, version, #name},
#include "rdma_library_calls.def"
#undef T2R_RDMA_CALL
};

struct Resolved {
  void* function[kCalls] = {};
  bool loaded = false;
  std::string why;
};

Resolved resolve() {
  // The libraries' constructors and first calls read files and close descriptors through the
  // module's wrappers: as the transport's own (own_calls.h).
  OwnCalls own;
  Resolved out;
  void* handle[kLibraries] = {};
  for (int l = 0; l < kLibraries; ++l) {
    // Never closed: their device contexts and threads live as long as the process.
    handle[l] = dlopen(kSonames[l], RTLD_NOW | RTLD_LOCAL);
    if (handle[l] == nullptr) {
      const char* error = dlerror();
      out.why = error != nullptr ? error : kSonames[l];
      return out;
    }
  }
  void* function[kCalls] = {};
  for (int c = 0; c < kCalls; ++c) {
    const Symbol& s = kSymbols[c];
    function[c] = dlvsym(handle[s.library], s.name, s.version);
    if (function[c] == nullptr) {
      out.why = std::string(kSonames[s.library]) + " has no " + s.name + "@" + s.version;
      return out;
    }
  }
  // All or none: a forwarder never reaches half a library.
  for (int c = 0; c < kCalls; ++c) out.function[c] = function[c];
  out.loaded = true;
  return out;
}

const Resolved& resolved() {
  static const Resolved libraries = resolve();  // once, whichever thread asks first; the others wait
  return libraries;
}

}  // namespace

// For the forwarders below (outside the namespace, under the libraries' names).
void* resolved_function(int call) { return resolved().function[call]; }

bool rdma_libraries_loaded(std::string* why) {
  const Resolved& r = resolved();
  if (!r.loaded && why != nullptr) *why = r.why;
  return r.loaded;
}

}  // namespace tcp2rdma::transport

// The forwarders, under the libraries' own names, so that verbs.h's and rdma_cma.h's declarations and
// inline functions call them unchanged. Hidden: only the module's (or a tool's) own calls bind to them.
// The parentheses around the name keep verbs.h's function-like macros of the same name
// (ibv_reg_mr, ibv_query_port ...) from expanding.
#define T2R_RDMA_CALL(library, version, type, name, parameters, arguments, failure)                      \
  extern "C" [[gnu::visibility("hidden")]] type(name) parameters {                                        \
    using Function = type(*) parameters;                                                                  \
    auto real = reinterpret_cast<Function>(tcp2rdma::transport::resolved_function(                      \
        tcp2rdma::transport::k_##name));                                                                  \
    if (real == nullptr) {                                                                                \
      errno = ENOSYS;                                                                                     \
      return failure;                                                                                     \
    }                                                                                                     \
    return real arguments;                                                                                \
  }
#include "rdma_library_calls.def"
#undef T2R_RDMA_CALL
