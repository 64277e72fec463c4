#include "rule_set.h"

#include <arpa/inet.h>

#include <algorithm>
#include <utility>

#include "glob.h"

namespace tcp2rdma::config {
namespace {

bool any_cidr(const std::vector<Cidr>& cidrs, const Ip6Words& ip) {
  for (const Cidr& cidr : cidrs) {
    if (cidr.contains(ip)) return true;
  }
  return false;
}

bool program_matches(const std::vector<std::string>& globs, const ProcessFacts& process) {
  for (const std::string& glob : globs) {
    bool by_path = glob.find('/') != std::string::npos;
    if (glob_match(glob, by_path ? process.program_path : process.program_name)) return true;
  }
  return false;
}

// 0.0.0.0, ::, or ::ffff:0.0.0.0: a listener there accepts on every local address.
bool is_wildcard(const sockaddr* address) {
  if (address->sa_family == AF_INET) {
    return reinterpret_cast<const sockaddr_in*>(address)->sin_addr.s_addr == htonl(INADDR_ANY);
  }
  const in6_addr& ip = reinterpret_cast<const sockaddr_in6*>(address)->sin6_addr;
  if (IN6_IS_ADDR_UNSPECIFIED(&ip)) return true;
  return IN6_IS_ADDR_V4MAPPED(&ip) && ip.s6_addr32[3] == 0;
}

bool ports_contain(const std::vector<PortRange>& ports, uint16_t port) {
  for (const PortRange& range : ports) {
    if (range.contains(port)) return true;
  }
  return false;
}

}  // namespace

bool Rule::matches_process(const ProcessFacts& process) const {
  if (!programs.empty() && !program_matches(programs, process)) return false;
  if (!uids.empty()) {
    bool found = false;
    for (uint32_t uid : uids) found = found || uid == process.uid;
    if (!found) return false;
  }
  return true;
}

ConnectionKey::ConnectionKey(const ConnectionFacts& connection) : role(connection.role) {
  Ip6 ip{};
  has_remote = to_ip6(connection.remote, &ip, &remote_port);
  if (has_remote) remote = to_words(ip);
  has_local = to_ip6(connection.local, &ip, &local_port);
  if (has_local) local = to_words(ip);
}

bool Rule::matches_connection(const ConnectionKey& connection) const {
  if (role.has_value() && *role != connection.role) return false;
  if (!remote.empty() && !(connection.has_remote && any_cidr(remote, connection.remote))) return false;
  if (!local.empty() && !(connection.has_local && any_cidr(local, connection.local))) return false;
  if (!ports.empty()) {
    // The service's port: the one a client connected to, the one a server accepted on.
    bool client = connection.role == Role::kClient;
    if (!(client ? connection.has_remote : connection.has_local)) return false;
    if (!ports_contain(ports, client ? connection.remote_port : connection.local_port)) return false;
  }
  return true;
}

Rule loopback_rule() {
  Rule rule;
  rule.name = "built-in: loopback stays tcp";
  std::string ignored;
  rule.remote = {*parse_cidr("127.0.0.0/8", &ignored), *parse_cidr("::1/128", &ignored)};
  rule.options.transport = Transport::kTcp;
  return rule;
}

RuleSet::RuleSet(std::string source, std::vector<Rule> rules, ConnectionOptions unmatched)
    : source_(std::move(source)), unmatched_(unmatched) {
  rules_.reserve(rules.size() + 1);
  rules_.push_back(loopback_rule());
  rules_.back().options = unmatched;
  rules_.back().options.transport = Transport::kTcp;
  for (Rule& rule : rules) rules_.push_back(std::move(rule));
  unmatched_.transport = Transport::kTcp;
}

RuleSet RuleSet::builtin() { return RuleSet("built-in", {}, ConnectionOptions{}); }

Decision RuleSet::match(const ProcessFacts& process, const ConnectionFacts& connection) const {
  ConnectionKey key(connection);
  for (const Rule& rule : rules_) {
    if (rule.matches_process(process) && rule.matches_connection(key)) return {&rule, &rule.options};
  }
  return {nullptr, &unmatched_};
}

}  // namespace tcp2rdma::config

namespace tcp2rdma::config {

ProcessRuleSet::ProcessRuleSet(const RuleSet& rules, const ProcessFacts& process) : unmatched_(&rules.unmatched()) {
  for (const Rule& rule : rules.rules()) {
    if (rule.matches_process(process)) candidates_.push_back(&rule);
  }
}

Decision ProcessRuleSet::match(const ConnectionFacts& connection) const {
  ConnectionKey key(connection);
  for (const Rule* rule : candidates_) {
    if (rule->matches_connection(key)) return {rule, &rule->options};
  }
  return {nullptr, unmatched_};
}

bool ProcessRuleSet::may_select_rdma(Role role) const {
  for (const Rule* rule : candidates_) {
    if (rule->options.transport == Transport::kRdma && (!rule->role.has_value() || *rule->role == role)) return true;
  }
  return false;
}

bool ProcessRuleSet::may_serve_at(const Rule& rule, const ConnectionKey& key, bool wildcard) {
  if (rule.options.transport != Transport::kRdma) return false;
  if (rule.role.has_value() && *rule.role != Role::kServer) return false;
  if (!key.has_local) return true;
  if (!rule.ports.empty() && !ports_contain(rule.ports, key.local_port)) return false;
  return rule.local.empty() || wildcard || any_cidr(rule.local, key.local);
}

bool ProcessRuleSet::may_select_rdma_at(const sockaddr* local) const {
  return longest_upgrade_timeout_at(local) != 0;
}

uint64_t ProcessRuleSet::longest_upgrade_timeout_at(const sockaddr* local) const {
  ConnectionKey key(ConnectionFacts{Role::kServer, nullptr, local});
  bool wildcard = key.has_local && is_wildcard(local);
  static const Rule loopback = loopback_rule();
  if (key.has_local && !wildcard && any_cidr(loopback.remote, key.local)) return 0;
  uint64_t longest = 0;
  for (const Rule* rule : candidates_) {
    // At least 1: a rule that may serve counts even with a zero timeout (which the loader refuses).
    if (may_serve_at(*rule, key, wildcard)) {
      longest = std::max({longest, rule->options.upgrade_timeout_us, uint64_t{1}});
    }
  }
  return longest;
}

}  // namespace tcp2rdma::config
