// Where the preload module lives, for the subcommands that load it (run preloads it into a command,
// doctor loads it into itself to prove it can be loaded).
#pragma once

#include <string>

namespace tcp2rdma::tools {

// TCP2RDMA_MODULE if set; else libtcp2rdma.so of the build tree this tool was built in; else the
// installed one. Not checked for existence: each caller says in its own words what is missing.
std::string find_module();

// Whether LD_PRELOAD can carry `path`: the dynamic loader splits it at spaces and colons, with no way
// to escape one, and skips (with a warning) what it cannot open, so a module under such a path would
// never be loaded into the command.
inline bool preloadable(const std::string& path) { return path.find_first_of(" \t\n:") == std::string::npos; }

}  // namespace tcp2rdma::tools
