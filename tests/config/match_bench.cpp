// match_bench: nanoseconds per RuleSet::match over 100 rules, the worst case where the connection
// matches only the last rule (or none). A benchmark to rerun, not a test: timings vary by machine.
#include <arpa/inet.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "rule_loader.h"

int main() {
  using namespace tcp2rdma::config;
  std::string yaml = "version: 1\nrules:\n";
  for (int i = 0; i < 99; ++i) {
    yaml += "  - {name: r" + std::to_string(i) + ", match: {program: 'prog" + std::to_string(i) +
            "*', role: client, remote: ['10." + std::to_string(i) + ".0.0/16', 'fd00:" + std::to_string(i) +
            "::/32'], ports: [5000-5100, 7000]}, transport: rdma}\n";
  }
  yaml += "  - {name: last, match: {program: 'iperf*', remote: 10.77.0.0/24, ports: 5201}, transport: rdma}\n";
  LoadResult loaded = load_rules_text(yaml, "bench.yaml");
  if (!loaded.ok()) {
    std::fprintf(stderr, "%s\n", loaded.errors.front().to_string().c_str());
    return 1;
  }
  sockaddr_in remote{}, local{};
  remote.sin_family = local.sin_family = AF_INET;
  inet_pton(AF_INET, "10.77.0.2", &remote.sin_addr);
  inet_pton(AF_INET, "10.77.0.1", &local.sin_addr);
  remote.sin_port = htons(5201);
  ProcessFacts process{"iperf3", "/usr/bin/iperf3", 1000};
  ConnectionFacts connection{Role::kClient, reinterpret_cast<sockaddr*>(&remote), reinterpret_cast<sockaddr*>(&local)};

  constexpr int kIterations = 200000;
  const Rule* sink = nullptr;
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < kIterations; ++i) {
    sink = loaded.rules.match(process, connection).rule;
    asm volatile("" : : "r"(sink) : "memory");  // keep the loop from being folded away
  }
  double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
  std::printf("RuleSet::match over %zu rules (the last one matches): %.0f ns per match (%s)\n",
              loaded.rules.rules().size(), ns / kIterations, sink != nullptr ? sink->name.c_str() : "none");
  bool ok = sink != nullptr && sink->name == "last";

  // What the preload module does: program and user resolved once per process.
  ProcessRuleSet bound(loaded.rules, process);
  start = std::chrono::steady_clock::now();
  for (int i = 0; i < kIterations; ++i) {
    sink = bound.match(connection).rule;
    asm volatile("" : : "r"(sink) : "memory");
  }
  ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
  std::printf("ProcessRuleSet::match, same rules, bound to the process once: %.0f ns per match (%s)\n",
              ns / kIterations, sink != nullptr ? sink->name.c_str() : "none");
  ok = ok && sink != nullptr && sink->name == "last";

  // Worst case for the bound form: no rule names a program, so all 100 are checked per connection.
  std::string unscoped = "version: 1\nrules:\n";
  for (int i = 0; i < 99; ++i) {
    unscoped += "  - {name: r" + std::to_string(i) + ", match: {role: client, remote: ['10." + std::to_string(i) +
                ".0.0/16', 'fd00:" + std::to_string(i) + "::/32'], ports: [5000-5100, 7000]}, transport: rdma}\n";
  }
  unscoped += "  - {name: last, match: {remote: 10.77.0.0/24, ports: 5201}, transport: rdma}\n";
  LoadResult all = load_rules_text(unscoped, "bench2.yaml");
  ProcessRuleSet bound_all(all.rules, process);
  start = std::chrono::steady_clock::now();
  for (int i = 0; i < kIterations; ++i) {
    sink = bound_all.match(connection).rule;
    asm volatile("" : : "r"(sink) : "memory");
  }
  ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
  std::printf("ProcessRuleSet::match, 101 rules none scoped by program (all checked): %.0f ns per match (%s)\n",
              ns / kIterations, sink != nullptr ? sink->name.c_str() : "none");
  return ok && all.ok() && sink != nullptr && sink->name == "last" ? 0 : 1;
}
