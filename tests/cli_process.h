// The tcp2rdma tool run as a user runs it, for the tests of its subcommands: a real process started
// by a shell, its exit status and what it printed.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace tcp2rdma::testing {

struct CliResult {
  int status;
  std::string output;  // stdout and stderr together
};

// `shell_prefix` runs first in the same shell (exports, unsets). In the sanitizer build the module
// carries ASan, which insists on being loaded first; `run` rightly puts the module first instead, so
// that check is relaxed for the programs run here.
inline CliResult run_cli(const std::string& cli, const std::string& args, const std::string& shell_prefix = "") {
  std::string command = "export ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0; " + shell_prefix + " " + cli +
                        " " + args + " 2>&1";
  CliResult result{-1, ""};
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  std::array<char, 4096> buffer;
  while (size_t n = fread(buffer.data(), 1, buffer.size(), pipe)) result.output.append(buffer.data(), n);
  int raw = pclose(pipe);
  result.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  return result;
}

}  // namespace tcp2rdma::testing
