// Which rule a connection gets: every match field, rule order, defaults, IPv6, the built-in rules and
// the environment overrides.
#include <arpa/inet.h>

#include <gtest/gtest.h>

#include "test_endpoint.h"

#include <unistd.h>

#include <cstring>
#include <map>
#include <string>

#include "rule_loader.h"

namespace tcp2rdma::config {
namespace {

class RuleMatch : public ::testing::Test {
 protected:
  void load(const char* yaml) {
    LoadResult result = load_rules_text(yaml, "test.yaml");
    ASSERT_TRUE(result.ok()) << result.errors.front().to_string();
    rules_ = std::move(result.rules);
  }
  // The name of the deciding rule ("" when none matched) and its options.
  std::string decide(const char* program, Role role, const char* remote_host, uint16_t remote_port,
                     const char* local_host = "10.77.0.1", uint16_t local_port = 40000, uint32_t uid = 1000,
                     const char* path = "/usr/bin/prog") {
    sockaddr_storage remote = endpoint(remote_host, remote_port), local = endpoint(local_host, local_port);
    ProcessFacts process{program, path, uid};
    ConnectionFacts connection{role, reinterpret_cast<sockaddr*>(&remote), reinterpret_cast<sockaddr*>(&local)};
    last_ = rules_.match(process, connection);
    // The per-process form must always agree with the full one.
    Decision bound = ProcessRuleSet(rules_, process).match(connection);
    EXPECT_EQ(bound.rule, last_.rule);
    EXPECT_EQ(bound.options, last_.options);
    return last_.rule == nullptr ? "" : last_.rule->name;
  }
  RuleSet rules_ = RuleSet::builtin();
  Decision last_{nullptr, nullptr};
};

TEST_F(RuleMatch, NoRulesMeansTcpForEverything) {
  EXPECT_EQ(decide("iperf3", Role::kClient, "10.77.0.2", 5201), "");
  EXPECT_EQ(last_.options->transport, Transport::kTcp);
}

TEST_F(RuleMatch, ProgramByNameByGlobAndByPath) {
  load("version: 1\nrules:\n"
       "  - {name: exact, match: {program: iperf3}, transport: rdma}\n"
       "  - {name: glob, match: {program: 'redis-*'}, transport: rdma}\n"
       "  - {name: path, match: {program: /opt/*/nc}, transport: rdma}\n");
  EXPECT_EQ(decide("iperf3", Role::kClient, "10.77.0.2", 1), "exact");
  EXPECT_EQ(decide("iperf", Role::kClient, "10.77.0.2", 1), "");
  EXPECT_EQ(decide("redis-server", Role::kServer, "10.77.0.2", 1), "glob");
  EXPECT_EQ(decide("nc", Role::kClient, "10.77.0.2", 1, "10.77.0.1", 1, 0, "/opt/x/nc"), "path");
  EXPECT_EQ(decide("nc", Role::kClient, "10.77.0.2", 1, "10.77.0.1", 1, 0, "/usr/bin/nc"), "");
}

TEST_F(RuleMatch, RoleAndThePortItLooksAt) {
  load("version: 1\nrules:\n"
       "  - {name: clients, match: {role: client, ports: 5201}, transport: rdma}\n"
       "  - {name: servers, match: {role: server, ports: [6000-6010]}, transport: rdma}\n");
  EXPECT_EQ(decide("x", Role::kClient, "10.77.0.2", 5201), "clients");
  EXPECT_EQ(decide("x", Role::kClient, "10.77.0.2", 5202), "");
  // A server's port is its local one; its peer's port is ephemeral.
  EXPECT_EQ(decide("x", Role::kServer, "10.77.0.2", 50000, "10.77.0.1", 6005), "servers");
  EXPECT_EQ(decide("x", Role::kServer, "10.77.0.2", 6005, "10.77.0.1", 50000), "");
  EXPECT_EQ(decide("x", Role::kServer, "10.77.0.2", 50000, "10.77.0.1", 5201), "");
}

// A listener gets an RDMA side only when a rule could select one of the connections it will accept:
// its port and (unless a wildcard) its address are theirs, its peers unknown.
TEST_F(RuleMatch, AListenersAddressAndPortDecideWhetherItMayGoRdma) {
  load("version: 1\nrules:\n"
       "  - {name: clients, match: {role: client, ports: 7000}, transport: rdma}\n"
       "  - {name: kept, match: {role: server, ports: 6000}, transport: tcp}\n"
       "  - {name: redis, match: {role: server, ports: 6390}, transport: rdma}\n"
       "  - {name: local, match: {role: server, ports: 8000, local: 10.77.0.0/24}, transport: rdma}\n"
       "  - {name: peers, match: {role: server, ports: 9000, remote: 10.77.0.2/32}, transport: rdma}\n");
  ProcessFacts process{"x", "/usr/bin/x", 1000};
  ProcessRuleSet bound(rules_, process);
  auto at = [&](const char* host, uint16_t port) {
    sockaddr_storage local = endpoint(host, port);
    return bound.may_select_rdma_at(reinterpret_cast<sockaddr*>(&local));
  };
  EXPECT_TRUE(at("0.0.0.0", 6390));
  EXPECT_TRUE(at("::", 6390));
  EXPECT_TRUE(at("10.77.0.1", 6390));
  EXPECT_FALSE(at("0.0.0.0", 21079));  // no server rule names the port
  EXPECT_FALSE(at("0.0.0.0", 7000));   // a client rule's port
  EXPECT_FALSE(at("0.0.0.0", 6000));   // only a tcp rule
  EXPECT_FALSE(at("127.0.0.1", 6390));  // loopback peers stay tcp
  EXPECT_FALSE(at("::1", 6390));
  EXPECT_TRUE(at("0.0.0.0", 8000));     // a wildcard accepts on 10.77.0.x too
  EXPECT_TRUE(at("::", 8000));
  EXPECT_TRUE(at("::ffff:0.0.0.0", 8000));
  EXPECT_TRUE(at("10.77.0.1", 8000));
  EXPECT_TRUE(at("::ffff:10.77.0.1", 8000));
  EXPECT_FALSE(at("192.0.2.1", 8000));
  EXPECT_TRUE(at("0.0.0.0", 9000));     // the peer is known only at accept
  EXPECT_TRUE(bound.may_select_rdma(Role::kServer));
  // Whatever it says, a connection it rules out matches no rdma rule.
  EXPECT_EQ(decide("x", Role::kServer, "10.77.0.2", 50000, "10.77.0.1", 21079), "");
  EXPECT_EQ(decide("x", Role::kServer, "10.77.0.2", 50000, "192.0.2.1", 8000), "");
}

// A listener holds a client's request for its application as long as the longest upgrade timeout of
// the rules that may select its connections (preload/listener/listener_state.h, request_hold): an inetd
// service's rule of 20 s, not the 5 s default.
TEST_F(RuleMatch, AListenersLongestUpgradeTimeoutIsThatOfTheRulesThatMaySelectIt) {
  load("version: 1\nrules:\n"
       "  - {name: clients, match: {role: client, ports: 5026}, transport: rdma, upgrade_timeout: 60s}\n"
       "  - {name: kept, match: {role: server, ports: 5026, remote: 10.77.0.9/32}, transport: tcp,"
       " upgrade_timeout: 90s}\n"
       "  - {name: inetd, match: {ports: 5026-5027}, transport: rdma, upgrade_timeout: 20s}\n"
       "  - {name: slow, match: {role: server, ports: 5027, remote: 10.77.0.2/32}, transport: rdma,"
       " upgrade_timeout: 30s}\n"
       "  - {name: other, match: {role: server, ports: 6000}, transport: rdma}\n");
  ProcessFacts process{"inetd", "/usr/sbin/inetd", 0};
  ProcessRuleSet bound(rules_, process);
  auto longest = [&](const char* host, uint16_t port) {
    sockaddr_storage local = endpoint(host, port);
    return bound.longest_upgrade_timeout_at(reinterpret_cast<sockaddr*>(&local));
  };
  EXPECT_EQ(longest("::", 5026), 20'000'000u);        // not the client rule's, nor the tcp rule's
  EXPECT_EQ(longest("0.0.0.0", 5027), 30'000'000u);   // its peers are not known yet: the longest
  EXPECT_EQ(longest("10.77.0.1", 6000), 5'000'000u);  // the default
  EXPECT_EQ(longest("0.0.0.0", 7000), 0u);            // no rule may select it
  EXPECT_EQ(longest("127.0.0.1", 5026), 0u);          // loopback peers stay tcp
}

TEST_F(RuleMatch, RemoteAndLocalAddresses) {
  load("version: 1\nrules:\n"
       "  - {name: remote, match: {remote: [10.77.0.0/24, 'fd00:77::/64']}, transport: rdma}\n"
       "  - {name: local, match: {local: 192.0.2.0/24}, transport: rdma}\n");
  EXPECT_EQ(decide("x", Role::kClient, "10.77.0.9", 1), "remote");
  EXPECT_EQ(decide("x", Role::kClient, "::ffff:10.77.0.9", 1), "remote");  // IPv4-mapped
  EXPECT_EQ(decide("x", Role::kClient, "fd00:77::5", 1), "remote");
  EXPECT_EQ(decide("x", Role::kClient, "fd00:78::5", 1), "");
  EXPECT_EQ(decide("x", Role::kClient, "10.78.0.9", 1, "192.0.2.3"), "local");
}

TEST_F(RuleMatch, UserByUidAndByName) {
  load("version: 1\nrules:\n"
       "  - {name: by-uid, match: {user: 1234}, transport: rdma}\n"
       "  - {name: by-name, match: {user: root}, transport: rdma}\n");
  EXPECT_EQ(decide("x", Role::kClient, "10.77.0.2", 1, "10.77.0.1", 1, 1234), "by-uid");
  EXPECT_EQ(decide("x", Role::kClient, "10.77.0.2", 1, "10.77.0.1", 1, 0), "by-name");
  EXPECT_EQ(decide("x", Role::kClient, "10.77.0.2", 1, "10.77.0.1", 1, 999), "");
}

TEST_F(RuleMatch, AllFieldsOfARuleMustHold) {
  load("version: 1\nrules:\n"
       "  - {name: all, match: {program: nc, role: client, remote: 10.0.0.0/8, ports: 80}, transport: rdma}\n");
  EXPECT_EQ(decide("nc", Role::kClient, "10.1.1.1", 80), "all");
  EXPECT_EQ(decide("nc", Role::kServer, "10.1.1.1", 80), "");
  EXPECT_EQ(decide("nc", Role::kClient, "11.1.1.1", 80), "");
  EXPECT_EQ(decide("nc", Role::kClient, "10.1.1.1", 81), "");
  EXPECT_EQ(decide("cat", Role::kClient, "10.1.1.1", 80), "");
}

TEST_F(RuleMatch, FirstMatchWinsInFileOrder) {
  load("version: 1\nrules:\n"
       "  - {name: narrow-tcp, match: {ports: 22}, transport: tcp}\n"
       "  - {name: wide-rdma, match: {remote: 10.0.0.0/8}, transport: rdma}\n");
  EXPECT_EQ(decide("x", Role::kClient, "10.1.1.1", 22), "narrow-tcp");
  EXPECT_EQ(last_.options->transport, Transport::kTcp);
  EXPECT_EQ(decide("x", Role::kClient, "10.1.1.1", 23), "wide-rdma");
  EXPECT_EQ(last_.options->transport, Transport::kRdma);
}

TEST_F(RuleMatch, LoopbackStaysTcpWhateverTheRules) {
  load("version: 1\nrules:\n  - {name: all, transport: rdma}\n");
  EXPECT_EQ(decide("x", Role::kClient, "127.0.0.1", 1), "built-in: loopback stays tcp");
  EXPECT_EQ(decide("x", Role::kClient, "127.8.9.10", 1), "built-in: loopback stays tcp");
  EXPECT_EQ(decide("x", Role::kClient, "::1", 1), "built-in: loopback stays tcp");
  EXPECT_EQ(last_.options->transport, Transport::kTcp);
  EXPECT_EQ(decide("x", Role::kClient, "10.77.0.2", 1), "all");
}

TEST_F(RuleMatch, DefaultsApplyToEveryRuleAndRulesOverrideThem) {
  load("version: 1\n"
       "defaults: {transport: rdma, upgrade: required, buffer_size: 4MiB, zcopy_threshold: 128KiB,\n"
       "           inline_threshold: 128B, send_queue_depth: 64, recv_queue_depth: 256,\n"
       "           connect_timeout: 500ms, upgrade_timeout: 3s, keepalive: 1m}\n"
       "rules:\n"
       "  - {name: plain, match: {ports: 1}}\n"
       "  - {name: own, match: {ports: 2}, buffer_size: 64KiB, upgrade: before-return, keepalive: 250us,\n"
       "     on_fork: parent, link_channels: 3000, linked_wait: 0ms, busy_poll: 250us, busy_poll_yield: off}\n"
       "  - {name: quiet, match: {ports: 4}, busy_poll: off}\n");
  decide("x", Role::kClient, "10.0.0.1", 1);
  ConnectionOptions expected;
  expected.transport = Transport::kRdma;
  expected.upgrade = UpgradeMode::kRequired;
  expected.buffer_size = 4 * kMiB;
  expected.zcopy_threshold = 128 * kKiB;
  expected.inline_threshold = 128;
  expected.send_queue_depth = 64;
  expected.recv_queue_depth = 256;
  expected.connect_timeout_us = 500 * kMicrosPerMilli;
  expected.upgrade_timeout_us = 3 * kMicrosPerSecond;
  expected.keepalive_us = 60 * kMicrosPerSecond;
  EXPECT_EQ(*last_.options, expected);
  ConnectionOptions quiet = expected;  // the defaults, and no spin
  quiet.busy_poll_us = 0;
  quiet.busy_poll_adaptive = false;
  decide("x", Role::kClient, "10.0.0.1", 2);
  expected.buffer_size = 64 * kKiB;
  expected.upgrade = UpgradeMode::kBeforeReturn;
  expected.keepalive_us = 250;
  expected.on_fork = ForkMode::kParent;
  expected.link_channels = 3000;
  expected.linked_wait_us = 0;
  expected.busy_poll_us = 250;
  expected.busy_poll_adaptive = false;
  expected.busy_poll_yield = PollYield::kOff;
  EXPECT_EQ(*last_.options, expected);
  decide("x", Role::kClient, "10.0.0.1", 4);
  EXPECT_EQ(*last_.options, quiet);
  // No rule matched: TCP, whatever the defaults say.
  decide("x", Role::kClient, "10.0.0.1", 3);
  EXPECT_EQ(last_.rule, nullptr);
  EXPECT_EQ(last_.options->transport, Transport::kTcp);
}

TEST_F(RuleMatch, RuleLinesPointIntoTheFile) {
  load("version: 1\nrules:\n  - name: first\n    transport: tcp\n  - name: second\n    transport: rdma\n");
  ASSERT_EQ(rules_.rules().size(), 3u);
  EXPECT_EQ(rules_.rules()[1].line, 3);
  EXPECT_EQ(rules_.rules()[2].line, 5);
}

// The environment, passed in as a map.
struct FakeEnv {
  std::map<std::string, std::string> vars;
  Environment get() const {
    return [this](const char* name) -> const char* {
      auto it = vars.find(name);
      return it == vars.end() ? nullptr : it->second.c_str();
    };
  }
};

class EffectiveRules : public ::testing::Test {
 protected:
  std::string write(const char* yaml) {
    char path[] = "/tmp/t2r-rules-XXXXXX";
    int fd = mkstemp(path);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(::write(fd, yaml, std::strlen(yaml)), static_cast<ssize_t>(std::strlen(yaml)));
    close(fd);
    files_.push_back(path);
    return path;
  }
  ~EffectiveRules() override {
    for (const auto& f : files_) unlink(f.c_str());
  }
  std::vector<std::string> files_;
};

TEST_F(EffectiveRules, NamedFileThenOverrides) {
  FakeEnv env;
  env.vars["TCP2RDMA_RULES"] = write("version: 1\nrules:\n  - {name: r, transport: rdma}\n");
  env.vars["TCP2RDMA_BUFFER_SIZE"] = "8MiB";
  env.vars["TCP2RDMA_ZCOPY_THRESHOLD"] = "256KiB";
  env.vars["TCP2RDMA_INLINE_THRESHOLD"] = "32";
  env.vars["TCP2RDMA_UPGRADE"] = "required";
  LoadResult result = load_effective_rules(env.get());
  ASSERT_TRUE(result.ok()) << result.errors.front().to_string();
  const ConnectionOptions& o = result.rules.rules().back().options;
  EXPECT_EQ(o.transport, Transport::kRdma);
  EXPECT_EQ(o.buffer_size, 8 * kMiB);
  EXPECT_EQ(o.zcopy_threshold, 256 * kKiB);
  EXPECT_EQ(o.inline_threshold, 32u);
  EXPECT_EQ(o.upgrade, UpgradeMode::kRequired);
  EXPECT_EQ(result.rules.source(), env.vars["TCP2RDMA_RULES"]);
}

TEST_F(EffectiveRules, TransportTcpIsAKillSwitch) {
  FakeEnv env;
  env.vars["TCP2RDMA_RULES"] = write("version: 1\nrules:\n  - {name: r, transport: rdma}\n");
  env.vars["TCP2RDMA_TRANSPORT"] = "tcp";
  LoadResult result = load_effective_rules(env.get());
  ASSERT_TRUE(result.ok());
  for (const Rule& rule : result.rules.rules()) EXPECT_EQ(rule.options.transport, Transport::kTcp);
}

TEST_F(EffectiveRules, BadVariablesAreErrorsAndKeepEverythingOnTcp) {
  FakeEnv env;
  env.vars["TCP2RDMA_RULES"] = write("version: 1\nrules:\n  - {name: r, transport: rdma}\n");
  env.vars["TCP2RDMA_BUFFER_SIZE"] = "lots";
  env.vars["TCP2RDMA_TRANSPORT"] = "infiniband";
  LoadResult result = load_effective_rules(env.get());
  ASSERT_EQ(result.errors.size(), 2u);
  EXPECT_EQ(result.errors[0].to_string().rfind("TCP2RDMA_BUFFER_SIZE: expected a size", 0), 0u);
  EXPECT_EQ(result.errors[1].to_string().rfind("TCP2RDMA_TRANSPORT: unknown value 'infiniband'", 0), 0u);
  for (const Rule& rule : result.rules.rules()) EXPECT_EQ(rule.options.transport, Transport::kTcp);
}

TEST_F(EffectiveRules, ABadFileKeepsEverythingOnTcp) {
  FakeEnv env;
  env.vars["TCP2RDMA_RULES"] = write("version: 1\nrules:\n  - {name: r, transport: rdma, buffer_size: 3MiB}\n");
  LoadResult result = load_effective_rules(env.get());
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.errors[0].line, 3);
  for (const Rule& rule : result.rules.rules()) EXPECT_EQ(rule.options.transport, Transport::kTcp);
}

TEST_F(EffectiveRules, AMissingNamedFileIsAnError) {
  FakeEnv env;
  env.vars["TCP2RDMA_RULES"] = "/nonexistent/rules.yaml";
  LoadResult result = load_effective_rules(env.get());
  ASSERT_EQ(result.errors.size(), 1u);
  EXPECT_NE(result.errors[0].message.find("cannot read"), std::string::npos);
}

}  // namespace
}  // namespace tcp2rdma::config
