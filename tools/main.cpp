// tcp2rdma: the command-line tool. `tcp2rdma help` lists the subcommands.
#include <cstdio>
#include <span>
#include <string_view>

#include "commands.h"

namespace {

constexpr char kUsage[] =
    "usage: tcp2rdma COMMAND [ARGS]\n"
    "  check FILE...          validate rule files; every error as file:line:column: message\n"
    "  explain [--rules FILE] --program NAME --role client|server --remote ADDR:PORT\n"
    "          [--local ADDR:PORT] [--user NAME|UID]\n"
    "                         show which rule decides such a connection, and its options\n"
    "  doctor [--rules FILE] [--peer ADDR] [--json]\n"
    "                         check this machine for RDMA (devices, ports, addresses, memlock, rdma_cm,\n"
    "                         the module, the rules) and say how to fix each problem\n"
    "  run [--rules FILE] [--log 1|/path] -- COMMAND [ARGS...]\n"
    "                         run COMMAND with libtcp2rdma.so preloaded\n"
    "  stat [--pid P] [--json] [--watch S] [-a|--all] | --clean\n"
    "                         one row per connection of the processes under the module: path (tcp,\n"
    "                         switching, rdma, back-on-tcp), bytes, rings, age, why it is on TCP\n"
    "  stats [--json] [--reset]\n"
    "                         totals over those processes: connections upgraded, on TCP by reason,\n"
    "                         bytes by path, setup times; --reset counts from zero again\n"
    "  --help, --version\n";

}  // namespace

int main(int argc, char** argv) {
  std::span<char*> args(argv, static_cast<size_t>(argc));
  if (args.size() < 2) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  std::string_view command = args[1];
  if (command == "--help" || command == "help" || command == "-h") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (command == "--version") {
    std::printf("tcp2rdma %s\n", TCP2RDMA_VERSION);
    return 0;
  }
  if (command == "check") return tcp2rdma::tools::check_command(args.subspan(2));
  if (command == "doctor") return tcp2rdma::tools::doctor_command(args.subspan(2));
  if (command == "explain") return tcp2rdma::tools::explain_command(args.subspan(2));
  if (command == "run") return tcp2rdma::tools::run_command(args.subspan(2));
  if (command == "stat") return tcp2rdma::tools::stat_command(args.subspan(2));
  if (command == "stats") return tcp2rdma::tools::stats_command(args.subspan(2));
  std::fprintf(stderr, "tcp2rdma: unknown command '%s'\n%s", args[1], kUsage);
  return 2;
}
