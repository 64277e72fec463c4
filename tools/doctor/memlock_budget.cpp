#include "memlock_budget.h"

#include <sys/resource.h>

#include <algorithm>
#include <exception>
#include <fstream>
#include <string>

#include "pin_budget.h"

namespace tcp2rdma::tools::doctor {
namespace {

constexpr int kCapIpcLock = 14;  // linux/capability.h

using transport::PinState;

PinState limited_to(uint64_t limit, uint64_t pinned) {
  PinState state;
  state.limited = true;
  state.limit = limit;
  state.pinned = pinned;
  return state;
}

// The number after "name:" in a /proc file (base 10 or 16), or nullopt.
std::optional<uint64_t> proc_field(const char* path, const std::string& name, int base) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name, 0) != 0) continue;
    try {
      return std::stoull(line.substr(name.size()), nullptr, base);
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
  return std::nullopt;
}

// Where the limit comes from, in the words of the fix: the user acts on RLIMIT_MEMLOCK or the
// capability, and learns when the machine's memory is the bound instead.
std::string describe_limit(const MemlockFacts& facts, uint64_t limit) {
  std::string rlimit = facts.rlimit ? "RLIMIT_MEMLOCK " + format_bytes(*facts.rlimit) : "RLIMIT_MEMLOCK unlimited";
  std::string text = facts.ipc_lock ? "CAP_IPC_LOCK (lifts " + rlimit + ")" : rlimit + ", no CAP_IPC_LOCK";
  if (facts.ipc_lock || !facts.rlimit || *facts.rlimit > limit) {
    text += "; the module pins at most a quarter of the memory, " + format_bytes(limit);
  }
  return text;
}

std::string describe_growth(uint64_t limit, const RingPlan& plan) {
  if (plan.grown_log2 <= plan.start_log2) return "";
  GrownRings grown = grown_rings_within(limit, plan.grown_log2, plan.start_log2);
  std::string size = format_bytes(uint64_t{1} << plan.grown_log2);
  if (grown.largest_log2 < plan.grown_log2) {
    std::string largest = grown.largest_log2 == 0
                            ? "none can grow"
                            : "rings grow to at most " + format_bytes(uint64_t{1} << grown.largest_log2);
    return "; " + largest + ", not to the rules' " + size + " (a grown ring may take a 64th of the limit)";
  }
  return "; " + std::to_string(grown.connections) + " of them at once could grow their ring to the rules' " + size;
}

}  // namespace

MemlockFacts read_memlock_facts() {
  MemlockFacts facts;
  rlimit limit{};
  if (getrlimit(RLIMIT_MEMLOCK, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) facts.rlimit = limit.rlim_cur;
  std::optional<uint64_t> caps = proc_field("/proc/self/status", "CapEff:", 16);
  facts.ipc_lock = caps && ((*caps >> kCapIpcLock) & 1) != 0;
  facts.mem_total = proc_field("/proc/meminfo", "MemTotal:", 10).value_or(0) * 1024;
  return facts;
}

std::optional<uint64_t> pin_limit(const MemlockFacts& facts) {
  std::optional<uint64_t> limit = facts.ipc_lock ? std::nullopt : facts.rlimit;
  if (facts.mem_total == 0) return limit;
  return std::min(limit.value_or(UINT64_MAX), facts.mem_total / 4);
}

uint32_t ring_log2_of(uint64_t buffer_size) {
  uint32_t log2 = 10;
  while (log2 < 29 && (uint64_t{1} << log2) < buffer_size) ++log2;
  return log2;
}

RingPlan ring_plan(uint64_t largest_buffer_size) {
  if (largest_buffer_size == 0) return RingPlan{};
  uint32_t grown = ring_log2_of(largest_buffer_size);
  return RingPlan{std::min(grown, kModuleStartRingLog2), grown};
}

FirstRings first_rings_within(uint64_t limit, uint32_t start_log2, bool grows) {
  const uint64_t fixed = transport::stream_fixed_pin(kSendQueueDepth);
  FirstRings out;
  uint64_t pinned = 0;
  auto next_ring = [&] {
    PinState state = limited_to(limit, pinned);
    uint32_t first = grows ? transport::crowded_first_ring_log2(start_log2, state) : start_log2;
    return transport::ring_log2_within(first, 0, fixed, state);
  };
  while (uint32_t r = next_ring()) {
    uint64_t cost = (uint64_t{2} << r) + fixed;  // peer_log2 0: the peer's ring as large as ours
    if (out.connections == 0) out = FirstRings{0, r, r, cost, false};
    out.last_ring_log2 = r;
    pinned += cost;
    if (++out.connections == kCountCap) {
      out.capped = true;
      break;
    }
  }
  return out;
}

GrownRings grown_rings_within(uint64_t limit, uint32_t grown_log2, uint32_t start_log2) {
  const uint64_t grown_cost = (uint64_t{1} << grown_log2) + (uint64_t{1} << start_log2) +
                              transport::stream_fixed_pin(kSendQueueDepth);
  GrownRings out;
  out.largest_log2 = transport::growth_log2_within(grown_log2, limited_to(limit, 0));
  uint64_t pinned = 0;
  while (out.connections < kCountCap &&
         transport::growth_log2_within(grown_log2, limited_to(limit, pinned)) == grown_log2) {
    pinned += grown_cost;
    ++out.connections;
  }
  return out;
}

Check judge_memlock(const MemlockFacts& facts, const RingPlan& plan) {
  std::optional<uint64_t> limit = pin_limit(facts);
  if (!limit) {
    return passed("memlock", "RLIMIT_MEMLOCK unlimited and the memory size unknown: nothing bounds pinned memory");
  }
  FirstRings first = first_rings_within(*limit, plan.start_log2, plan.start_log2 < plan.grown_log2);
  std::string finding = describe_limit(facts, *limit) + ": ";
  if (first.connections == 0) {
    uint32_t smallest = std::min(plan.start_log2, transport::kSmallestBudgetRingLog2);
    finding += "not one connection fits on RDMA (the smallest needs " +
               format_bytes((uint64_t{2} << smallest) + transport::stream_fixed_pin(kSendQueueDepth)) + ")";
  } else {
    finding += (first.capped ? "at least " : "about ") + std::to_string(first.connections) +
               " connections fit on RDMA at once (" + format_bytes(uint64_t{1} << first.ring_log2) + " rings, " +
               format_bytes(first.per_connection) + " pinned each with the peer's mirror and the mailboxes" +
               (first.last_ring_log2 < first.ring_log2
                    ? "; the later ones " + format_bytes(uint64_t{1} << first.last_ring_log2) + " rings"
                    : std::string()) +
               ")" + describe_growth(*limit, plan);
  }
  if (first.connections < kFailBelowConnections) {
    return failed("memlock", finding,
                  "raise the limit of the user who runs the application: `ulimit -l unlimited` (as root, in the "
                  "shell that starts it), a `memlock` line in /etc/security/limits.conf (`USER - memlock "
                  "unlimited`), LimitMEMLOCK=infinity for a systemd service; or give the program CAP_IPC_LOCK");
  }
  if (first.connections < kWarnBelowConnections) {
    return warned("memlock", finding + "; fewer than " + std::to_string(kWarnBelowConnections) +
                                 ": connections beyond them stay TCP (raise RLIMIT_MEMLOCK)");
  }
  return passed("memlock", finding);
}

}  // namespace tcp2rdma::tools::doctor
