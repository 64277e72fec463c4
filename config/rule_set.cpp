#include "rule_set.h"

#include <utility>

#include "glob.h"

namespace tcp2rdma::config {
namespace {

bool any_cidr(const std::vector<Cidr>& cidrs, const Ip6& ip) {
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

}  // namespace

bool Rule::matches(const ProcessFacts& process, const ConnectionFacts& connection) const {
  if (role.has_value() && *role != connection.role) return false;
  if (!programs.empty() && !program_matches(programs, process)) return false;
  if (!uids.empty()) {
    bool found = false;
    for (uint32_t uid : uids) found = found || uid == process.uid;
    if (!found) return false;
  }
  Ip6 ip{};
  uint16_t remote_port = 0, local_port = 0;
  if (!remote.empty() && !(to_ip6(connection.remote, &ip, &remote_port) && any_cidr(remote, ip))) return false;
  if (!local.empty() && !(to_ip6(connection.local, &ip, &local_port) && any_cidr(local, ip))) return false;
  if (!ports.empty()) {
    const sockaddr* side = connection.role == Role::kClient ? connection.remote : connection.local;
    uint16_t port = 0;
    if (!to_ip6(side, &ip, &port)) return false;
    bool found = false;
    for (const PortRange& range : ports) found = found || range.contains(port);
    if (!found) return false;
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
  for (const Rule& rule : rules_) {
    if (rule.matches(process, connection)) return {&rule, &rule.options};
  }
  return {nullptr, &unmatched_};
}

}  // namespace tcp2rdma::config
