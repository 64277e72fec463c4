// tcp2rdma explain: which rule decides a described connection, and the options it would get.
#include <arpa/inet.h>
#include <pwd.h>
#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "commands.h"
#include "rdma_address.h"
#include "rule_loader.h"
#include "units.h"

namespace tcp2rdma::tools {
namespace {

constexpr char kUsage[] =
    "usage: tcp2rdma explain [--rules FILE] --program NAME --role client|server --remote ADDR:PORT\n"
    "                        [--local ADDR:PORT] [--user NAME|UID]\n"
    "  IPv6 addresses in brackets: [fd00::1]:5201. Without --rules: the rules this host would use\n"
    "  (TCP2RDMA_RULES, else /etc/tcp2rdma/rules.yaml, else built-in), with environment overrides.\n";

// "10.0.0.1:80" or "[fd00::1]:80".
std::optional<sockaddr_storage> parse_endpoint(std::string_view text) {
  std::string host;
  std::string_view port;
  if (!text.empty() && text.front() == '[') {
    size_t close = text.find("]:");
    if (close == std::string_view::npos) return std::nullopt;
    host = std::string(text.substr(1, close - 1));
    port = text.substr(close + 2);
  } else {
    size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return std::nullopt;
    host = std::string(text.substr(0, colon));
    port = text.substr(colon + 1);
  }
  unsigned number = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), number);
  if (ec != std::errc() || end != port.data() + port.size() || number > 65535) return std::nullopt;
  sockaddr_storage storage{};
  auto* v4 = reinterpret_cast<sockaddr_in*>(&storage);
  auto* v6 = reinterpret_cast<sockaddr_in6*>(&storage);
  if (inet_pton(AF_INET, host.c_str(), &v4->sin_addr) == 1) {
    v4->sin_family = AF_INET;
    v4->sin_port = htons(static_cast<uint16_t>(number));
  } else if (inet_pton(AF_INET6, host.c_str(), &v6->sin6_addr) == 1) {
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(static_cast<uint16_t>(number));
  } else {
    return std::nullopt;
  }
  return storage;
}

std::optional<uint32_t> parse_user(const std::string& text) {
  uint32_t uid = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), uid);
  if (ec == std::errc() && end == text.data() + text.size()) return uid;
  if (const passwd* entry = getpwnam(text.c_str())) return entry->pw_uid;
  return std::nullopt;
}

int usage(const char* problem) {
  std::fprintf(stderr, "tcp2rdma explain: %s\n%s", problem, kUsage);
  return 2;
}

void print_options(const config::ConnectionOptions& o) {
  std::printf("  transport         %s\n", config::to_string(o.transport));
  std::printf("  upgrade           %s\n", config::to_string(o.upgrade));
  std::printf("  on_fork           %s\n", config::to_string(o.on_fork));
  std::printf("  buffer_size       %s\n", config::format_size(o.buffer_size).c_str());
  std::printf("  zcopy_threshold   %s\n", config::format_size(o.zcopy_threshold).c_str());
  std::printf("  inline_threshold  %s\n", config::format_size(o.inline_threshold).c_str());
  std::printf("  send_queue_depth  %u\n", o.send_queue_depth);
  std::printf("  recv_queue_depth  %u\n", o.recv_queue_depth);
  std::printf("  link_channels     %u\n", o.link_channels);
  std::printf("  connect_timeout   %s\n", config::format_duration_us(o.connect_timeout_us).c_str());
  std::printf("  upgrade_timeout   %s\n", config::format_duration_us(o.upgrade_timeout_us).c_str());
  std::printf("  keepalive         %s\n", config::format_duration_us(o.keepalive_us).c_str());
  std::printf("  linked_wait       %s\n", config::format_duration_us(o.linked_wait_us).c_str());
  std::string busy_poll = o.busy_poll_us == 0 ? "off"
                          : o.busy_poll_adaptive ? "adaptive (up to " + config::format_duration_us(o.busy_poll_us) + ")"
                                                 : config::format_duration_us(o.busy_poll_us);
  std::printf("  busy_poll         %s\n", busy_poll.c_str());
  std::printf("  busy_poll_yield   %s\n", config::to_string(o.busy_poll_yield));
}

std::string endpoint_text(const sockaddr_storage& s) {
  char host[INET6_ADDRSTRLEN] = "?";
  if (s.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&s)->sin_addr, host, sizeof host);
    return std::string(host) + ":" + std::to_string(ntohs(reinterpret_cast<const sockaddr_in*>(&s)->sin_port));
  }
  inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&s)->sin6_addr, host, sizeof host);
  return "[" + std::string(host) + "]:" + std::to_string(ntohs(reinterpret_cast<const sockaddr_in6*>(&s)->sin6_port));
}

// Where rdma_cm is pointed for the connection: a client's request goes to the remote address, a
// server's listener is at the local one (when given). An IPv4-mapped address is used as the IPv4 one.
void print_rdma_address(bool client, const std::optional<sockaddr_storage>& remote,
                        const std::optional<sockaddr_storage>& local) {
  const std::optional<sockaddr_storage>& side = client ? remote : local;
  if (!side) return;
  const sockaddr* address = reinterpret_cast<const sockaddr*>(&*side);
  std::string used = endpoint_text(transport::rdma_address(address));
  const char* verb = client ? "connects to" : "listens at";
  if (transport::is_ipv4_mapped(address)) {
    std::printf("rdma_cm:  %s %s (%s is IPv4-mapped; the application still sees it)\n", verb, used.c_str(),
                endpoint_text(*side).c_str());
  } else {
    std::printf("rdma_cm:  %s %s\n", verb, used.c_str());
  }
}

}  // namespace

int explain_command(std::span<char*> args) {
  std::string rules_file, program, role, user;
  std::optional<sockaddr_storage> remote, local;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string_view flag = args[i];
    if (i + 1 >= args.size()) return usage(("missing value after " + std::string(flag)).c_str());
    const char* value = args[++i];
    if (flag == "--rules") {
      rules_file = value;
    } else if (flag == "--program") {
      program = value;
    } else if (flag == "--role") {
      role = value;
    } else if (flag == "--user") {
      user = value;
    } else if (flag == "--remote" || flag == "--local") {
      auto endpoint = parse_endpoint(value);
      if (!endpoint) return usage(("bad address '" + std::string(value) + "': expected ADDR:PORT").c_str());
      (flag == "--remote" ? remote : local) = endpoint;
    } else {
      return usage(("unknown option " + std::string(flag)).c_str());
    }
  }
  if (program.empty() || role.empty() || !remote) return usage("--program, --role and --remote are required");
  if (role != "client" && role != "server") return usage("--role must be client or server");
  std::optional<uint32_t> uid = user.empty() ? std::optional<uint32_t>(getuid()) : parse_user(user);
  if (!uid) return usage(("unknown user '" + user + "'").c_str());

  config::LoadResult loaded = rules_file.empty() ? config::load_effective_rules(&std::getenv)
                                                 : config::load_rules_file(rules_file);
  if (!loaded.ok()) {
    for (const config::Diagnostic& error : loaded.errors) std::fprintf(stderr, "%s\n", error.to_string().c_str());
    std::fputs("tcp2rdma explain: the rules have errors; the module would keep every connection on TCP\n", stderr);
    return 1;
  }
  std::string path = program.find('/') != std::string::npos ? program : "";
  std::string name = path.empty() ? program : program.substr(program.rfind('/') + 1);
  config::ProcessFacts process{name, path, *uid};
  config::ConnectionFacts connection{role == "client" ? config::Role::kClient : config::Role::kServer,
                                     reinterpret_cast<const sockaddr*>(&*remote),
                                     local ? reinterpret_cast<const sockaddr*>(&*local) : nullptr};
  config::Decision decision = loaded.rules.match(process, connection);
  std::printf("decision: %s\n", config::to_string(decision.options->transport));
  if (decision.rule == nullptr) {
    std::printf("rule:     none matched (%s): the connection stays TCP\n", loaded.rules.source().c_str());
  } else if (decision.rule->line == 0) {
    std::printf("rule:     %s\n", decision.rule->name.c_str());
  } else {
    std::printf("rule:     %s (%s:%d)\n", decision.rule->name.c_str(), loaded.rules.source().c_str(),
                decision.rule->line);
  }
  if (decision.options->transport == config::Transport::kRdma) print_rdma_address(role == "client", remote, local);
  std::puts("options:");
  print_options(*decision.options);
  return 0;
}

}  // namespace tcp2rdma::tools
