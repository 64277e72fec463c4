// tcp2rdma run [--rules FILE] [--log DEST] -- COMMAND [ARGS...]: runs COMMAND with the module preloaded.
// A rule file is checked first: a broken one stops here with every error listed, instead of running
// the command with everything on TCP as the module itself would.
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "commands.h"
#include "module_path.h"
#include "rule_loader.h"

namespace tcp2rdma::tools {
namespace {

constexpr char kUsage[] =
    "usage: tcp2rdma run [--rules FILE] [--log 1|/path] -- COMMAND [ARGS...]\n"
    "  runs COMMAND with libtcp2rdma.so preloaded (TCP2RDMA_MODULE overrides where it is found)\n";

int usage(const char* problem) {
  std::fprintf(stderr, "tcp2rdma run: %s\n%s", problem, kUsage);
  return 2;
}

}  // namespace

int run_command(std::span<char*> args) {
  std::string rules, log;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    std::string_view flag = args[i];
    if (flag == "--") break;
    if (i + 1 >= args.size()) return usage(("missing value after " + std::string(flag)).c_str());
    if (flag == "--rules") {
      rules = args[++i];
    } else if (flag == "--log") {
      log = args[++i];
    } else {
      return usage(("unknown option " + std::string(flag)).c_str());
    }
  }
  if (i >= args.size() || i + 1 >= args.size()) return usage("expected -- and then the command to run");
  char** command = &args[i + 1];

  if (!rules.empty()) {
    config::LoadResult loaded = config::load_rules_file(rules);
    if (!loaded.ok()) {
      for (const config::Diagnostic& error : loaded.errors) std::fprintf(stderr, "%s\n", error.to_string().c_str());
      std::fputs("tcp2rdma run: not running the command: fix the rule file first\n", stderr);
      return 1;
    }
    char resolved[PATH_MAX];
    setenv("TCP2RDMA_RULES", realpath(rules.c_str(), resolved) != nullptr ? resolved : rules.c_str(), 1);
  }
  if (!log.empty()) setenv("TCP2RDMA_LOG", log.c_str(), 1);

  std::string module = find_module();
  if (access(module.c_str(), R_OK) != 0) {
    std::fprintf(stderr, "tcp2rdma run: cannot find the module at %s (set TCP2RDMA_MODULE)\n", module.c_str());
    return 1;
  }
  // A module LD_PRELOAD cannot carry would be skipped: the command would run on kernel TCP, silently.
  if (!preloadable(module)) {
    std::fprintf(stderr,
                 "tcp2rdma run: the module's path '%s' has a space or colon, which LD_PRELOAD cannot carry: "
                 "set TCP2RDMA_MODULE to a path without them (a symlink to the module will do)\n",
                 module.c_str());
    return 1;
  }
  // Ours first; anything the user preloads already stays, after it.
  const char* existing = std::getenv("LD_PRELOAD");
  std::string preload = module + (existing != nullptr && *existing != '\0' ? std::string(":") + existing : "");
  setenv("LD_PRELOAD", preload.c_str(), 1);

  execvp(command[0], command);
  std::fprintf(stderr, "tcp2rdma run: cannot run '%s': %s\n", command[0], std::strerror(errno));
  return 127;
}

}  // namespace tcp2rdma::tools
