#include "module_path.h"

#include <unistd.h>

#include <climits>
#include <cstdlib>

namespace tcp2rdma::tools {
namespace {

std::string directory_of_this_program() {
  char path[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) return ".";
  std::string exe(path, static_cast<size_t>(n));
  return exe.substr(0, exe.rfind('/'));
}

}  // namespace

// The build tree keeps the module in ../preload beside tools/; an installation in the library directory.
std::string find_module() {
  if (const char* forced = std::getenv("TCP2RDMA_MODULE"); forced != nullptr && *forced != '\0') return forced;
  std::string in_build_tree = directory_of_this_program() + "/../preload/libtcp2rdma.so";
  if (access(in_build_tree.c_str(), R_OK) == 0) {
    char resolved[PATH_MAX];
    if (realpath(in_build_tree.c_str(), resolved) != nullptr) return resolved;
  }
  return TCP2RDMA_INSTALLED_MODULE;
}

}  // namespace tcp2rdma::tools
