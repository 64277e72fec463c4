// tcp2rdma doctor [--rules FILE] [--peer ADDR] [--json]: checks what the module needs of this machine,
// one line per check, and says how to fix each failure (docs/doctor.md). Exit status 0 when nothing
// failed (warnings allowed), 1 when a check failed, 2 for bad usage.
#include <arpa/inet.h>
#include <netdb.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "commands.h"
#include "doctor/checks.h"
#include "module_path.h"

namespace tcp2rdma::tools {
namespace {

using doctor::Check;

constexpr char kUsage[] =
    "usage: tcp2rdma doctor [--rules FILE] [--peer ADDR] [--json]\n"
    "  checks RDMA devices, ports, addresses, device files, RLIMIT_MEMLOCK, rdma_cm, the module and the\n"
    "  rules; --peer also resolves an RDMA route to ADDR (an IPv4 or IPv6 address, not a name)\n";

struct Options {
  std::string rules;
  std::string peer_text;
  std::optional<sockaddr_storage> peer;
  bool json = false;
};

int usage(const std::string& problem) {
  std::fprintf(stderr, "tcp2rdma doctor: %s\n%s", problem.c_str(), kUsage);
  return 2;
}

// A literal only: doctor never looks a name up, and contacts no one the user did not name. IPv4 in
// dotted quads (inet_pton, not getaddrinfo's inet_aton that reads "10.1" as 10.0.0.1); IPv6 through
// getaddrinfo, for its zone (fe80::1%eth0).
std::optional<sockaddr_storage> parse_address(const std::string& text) {
  sockaddr_storage address{};
  auto* v4 = reinterpret_cast<sockaddr_in*>(&address);
  if (inet_pton(AF_INET, text.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    return address;
  }
  addrinfo hints{};
  hints.ai_family = AF_INET6;
  hints.ai_flags = AI_NUMERICHOST;
  addrinfo* found = nullptr;
  if (getaddrinfo(text.c_str(), nullptr, &hints, &found) != 0 || found == nullptr) return std::nullopt;
  std::memcpy(&address, found->ai_addr, std::min<size_t>(found->ai_addrlen, sizeof address));
  freeaddrinfo(found);
  return address;
}

// nullopt when the command is to run; else the exit status it ends with (--help, bad usage).
std::optional<int> parse(std::span<char*> args, Options* options) {
  for (size_t i = 0; i < args.size(); ++i) {
    std::string_view flag = args[i];
    if (flag == "--help" || flag == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (flag == "--json") {
      options->json = true;
      continue;
    }
    if (flag != "--rules" && flag != "--peer") return usage("unknown argument '" + std::string(flag) + "'");
    if (i + 1 >= args.size()) return usage("missing value after " + std::string(flag));
    std::string value = args[++i];
    if (flag == "--rules") {
      options->rules = value;
      continue;
    }
    options->peer = parse_address(value);
    if (!options->peer) return usage("--peer wants an IPv4 or IPv6 address, not '" + value + "'");
    options->peer_text = value;
  }
  return std::nullopt;
}

std::vector<Check> run_checks(const Options& options) {
  doctor::Inventory inventory = doctor::read_inventory();
  doctor::RuleFile rules = doctor::find_rule_file(options.rules);
  std::vector<Check> checks;
  checks.push_back(doctor::check_devices(inventory));
  checks.push_back(doctor::check_ports(inventory));
  checks.push_back(doctor::check_addresses(inventory));
  checks.push_back(doctor::check_rule_addresses(inventory, rules));
  checks.push_back(doctor::check_device_files("/dev/infiniband"));
  checks.push_back(doctor::check_memlock(doctor::ring_plan(doctor::largest_rdma_buffer(rules))));
  checks.push_back(doctor::check_descriptors());
  checks.push_back(doctor::check_rdma_cm());
  checks.push_back(doctor::check_module(find_module()));
  checks.push_back(doctor::check_rules(rules));
  if (options.peer) checks.push_back(doctor::check_peer(*options.peer, options.peer_text));
  return checks;
}

}  // namespace

int doctor_command(std::span<char*> args) {
  Options options;
  if (std::optional<int> status = parse(args, &options)) return *status;
  std::vector<Check> checks = run_checks(options);
  if (options.json) {
    std::printf("%s\n", doctor::format_json(checks).c_str());
  } else {
    for (const Check& check : checks) std::printf("%s\n", doctor::format_line(check).c_str());
  }
  return doctor::none_failed(checks) ? 0 : 1;
}

}  // namespace tcp2rdma::tools
