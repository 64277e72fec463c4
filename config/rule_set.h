// A compiled, immutable set of rules and the pure function that picks one for a connection.
// Rules are tried in order and the first match wins; a connection no rule matches stays TCP.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "address_range.h"
#include "options.h"

namespace tcp2rdma::config {

enum class Role : uint8_t { kClient, kServer };

// Per process: computed once (program name and path from /proc/self/exe, the real uid).
struct ProcessFacts {
  std::string_view program_name;  // basename
  std::string_view program_path;  // full path
  uint32_t uid = 0;
};

// Per connection, as the kernel reports it (getsockname/getpeername).
struct ConnectionFacts {
  Role role = Role::kClient;
  const sockaddr* remote = nullptr;
  const sockaddr* local = nullptr;
};

// A connection's facts in the form matching compares, computed once per match rather than per rule.
struct ConnectionKey {
  explicit ConnectionKey(const ConnectionFacts& connection);
  Role role;
  bool has_remote = false;
  bool has_local = false;
  Ip6Words remote;
  Ip6Words local;
  uint16_t remote_port = 0;
  uint16_t local_port = 0;
};

struct Rule {
  std::string name;
  int line = 0;  // where the rule starts in its file (1-based); 0 for built-in rules
  // Match fields: an empty list (or no role) matches anything.
  std::vector<std::string> programs;  // globs; with a '/', against the full path, else the basename
  std::optional<Role> role;
  std::vector<Cidr> remote;
  std::vector<Cidr> local;
  std::vector<PortRange> ports;  // the remote port for clients, the local port for servers
  std::vector<uint32_t> uids;
  ConnectionOptions options;  // effective: built-in defaults, then the file's defaults, then the rule

  bool matches(const ProcessFacts& process, const ConnectionFacts& connection) const {
    return matches_process(process) && matches_connection(ConnectionKey(connection));
  }
  bool matches_process(const ProcessFacts& process) const;        // program and user
  bool matches_connection(const ConnectionKey& connection) const;  // role, addresses, ports
};

struct Decision {
  const Rule* rule;  // the rule that matched, or nullptr: no rule matched, the connection stays TCP
  const ConnectionOptions* options;
};

class RuleSet {
 public:
  // The set used when no rule file exists: only the built-in loopback rule, so everything stays TCP.
  static RuleSet builtin();

  RuleSet(std::string source, std::vector<Rule> rules, ConnectionOptions unmatched);

  // Allocation-free; safe to call from any number of threads.
  Decision match(const ProcessFacts& process, const ConnectionFacts& connection) const;

  const std::string& source() const { return source_; }  // a file path, or "built-in"
  const std::vector<Rule>& rules() const { return rules_; }
  const ConnectionOptions& unmatched() const { return unmatched_; }

  // Changes the options of every decision, matched or not (environment overrides).
  template <typename Fn>
  void update_options(Fn&& update) {
    for (Rule& rule : rules_) update(rule.options);
    update(unmatched_);
  }

  // Forces every decision to TCP (TCP2RDMA_TRANSPORT=tcp, or a rule file that failed to load).
  void force_tcp() {
    update_options([](ConnectionOptions& options) { options.transport = Transport::kTcp; });
  }

 private:
  std::string source_;
  std::vector<Rule> rules_;  // the built-in loopback rule first, then the file's, in order
  ConnectionOptions unmatched_;
};

// The rules that can apply to one process, picked once (program and user are fixed for a process's
// life), so that matching a connection only looks at its role, addresses and ports. Refers into the
// RuleSet, which must outlive it.
class ProcessRuleSet {
 public:
  ProcessRuleSet(const RuleSet& rules, const ProcessFacts& process);

  // Allocation-free; safe to call from any number of threads. Same result as RuleSet::match.
  Decision match(const ConnectionFacts& connection) const;

  // Whether some rule could send a connection of this process in `role` over RDMA: a listener needs
  // its RDMA side before it knows its peers.
  bool may_select_rdma(Role role) const;

  // The same for the connections a listener bound to `local` will accept: their local port is its
  // port, and their local address its address unless it is a wildcard; their peers are not known
  // yet. False for a loopback address (its peers are loopback ones, which stay TCP).
  bool may_select_rdma_at(const sockaddr* local) const;

  // The longest upgrade_timeout (microseconds) of the rules that may_select_rdma_at `local`, 0 when
  // none may: how long a listener there holds a client's request for its application to accept the
  // connection (an inetd service, a PostgreSQL backend: a fork and an exec before the first call).
  uint64_t longest_upgrade_timeout_at(const sockaddr* local) const;

 private:
  // Whether `rule` may send a connection accepted at `key` over RDMA (may_select_rdma_at).
  static bool may_serve_at(const Rule& rule, const ConnectionKey& key, bool wildcard);

  std::vector<const Rule*> candidates_;
  const ConnectionOptions* unmatched_;
};

// Built-in rule, always first: loopback peers (127.0.0.0/8, ::1) stay TCP. Soft or hard RoCE devices
// cannot carry loopback addresses, and kernel TCP over loopback is already memory-speed.
Rule loopback_rule();

}  // namespace tcp2rdma::config
