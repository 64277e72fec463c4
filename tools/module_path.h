// Where the preload module lives, for the subcommands that load it (run preloads it into a command,
// doctor loads it into itself to prove it can be loaded).
#pragma once

#include <string>

namespace tcp2rdma::tools {

// TCP2RDMA_MODULE if set; else libtcp2rdma.so of the build tree this tool was built in; else the
// installed one. Not checked for existence: each caller says in its own words what is missing.
std::string find_module();

}  // namespace tcp2rdma::tools
