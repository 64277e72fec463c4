// tcp2rdma check FILE...: every error of every file, as file:line:column: message.
#include <cstdio>

#include "commands.h"
#include "rule_loader.h"

namespace tcp2rdma::tools {

int check_command(std::span<char*> args) {
  if (args.empty()) {
    std::fputs("usage: tcp2rdma check FILE...\n", stderr);
    return 2;
  }
  int status = 0;
  for (const char* file : args) {
    config::LoadResult result = config::load_rules_file(file);
    if (result.ok()) {
      std::printf("%s: ok (%zu rules)\n", file, result.rules.rules().size() - 1);  // less the built-in one
      continue;
    }
    for (const config::Diagnostic& error : result.errors) std::fprintf(stderr, "%s\n", error.to_string().c_str());
    status = 1;
  }
  return status;
}

}  // namespace tcp2rdma::tools
