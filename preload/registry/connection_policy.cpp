#include "registry/connection_policy.h"

#include <arpa/inet.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "libc/real_calls.h"
#include "rdma_libraries.h"
#include "registry/connection_stats.h"
#include "rule_loader.h"
#include "util/log.h"
#include "util/saved_errno.h"

namespace tcp2rdma::preload {
namespace {

// Built on first use and kept for the life of the process (fork children inherit it; exec'd programs
// load their own). Never destroyed: wrappers may still run during exit.
struct ProcessPolicy {
  std::string program_path;
  std::string program_name;
  config::LoadResult loaded;
  config::ProcessRuleSet* bound = nullptr;
};

ProcessPolicy* g_policy = nullptr;
std::once_flag g_policy_once;

std::string own_executable() {
  char path[4096];
  ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  return n > 0 ? std::string(path, static_cast<size_t>(n)) : std::string();
}

void build_policy() {
  auto* policy = new ProcessPolicy;
  policy->program_path = own_executable();
  policy->program_name = policy->program_path.substr(policy->program_path.rfind('/') + 1);
  policy->loaded = config::load_effective_rules(&std::getenv);
  if (!policy->loaded.ok()) {
    const auto& errors = policy->loaded.errors;
    std::string extra = errors.size() > 1 ? " (and " + std::to_string(errors.size() - 1) + " more)" : "";
    log_always("rules: %s%s; every connection stays TCP", errors.front().to_string().c_str(), extra.c_str());
  }
  config::ProcessFacts facts{policy->program_name, policy->program_path, static_cast<uint32_t>(getuid())};
  policy->bound = new config::ProcessRuleSet(policy->loaded.rules, facts);
  g_policy = policy;
}

}  // namespace

void format_endpoint(const sockaddr_storage& s, bool valid, char* out, size_t size) {
  char host[INET6_ADDRSTRLEN] = "?";
  if (!valid) {
    snprintf(out, size, "?");
  } else if (s.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&s);
    inet_ntop(AF_INET, &v4->sin_addr, host, sizeof host);
    snprintf(out, size, "%s:%u", host, ntohs(v4->sin_port));
  } else {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&s);
    inet_ntop(AF_INET6, &v6->sin6_addr, host, sizeof host);
    snprintf(out, size, "[%s]:%u", host, ntohs(v6->sin6_port));
  }
}

const config::ProcessRuleSet& process_rules() {
  std::call_once(g_policy_once, build_policy);
  return *g_policy->bound;
}

namespace {

void endpoints(int fd, const sockaddr* remote_hint, socklen_t remote_hint_len, sockaddr_storage* local,
               bool* has_local, sockaddr_storage* remote, bool* has_remote) {
  socklen_t remote_len = sizeof *remote, local_len = sizeof *local;
  *has_remote = real().getpeername(fd, reinterpret_cast<sockaddr*>(remote), &remote_len) == 0;
  if (!*has_remote && remote_hint != nullptr && remote_hint_len > 0 && remote_hint_len <= sizeof *remote &&
      (remote_hint->sa_family == AF_INET || remote_hint->sa_family == AF_INET6)) {
    std::memcpy(remote, remote_hint, remote_hint_len);
    *has_remote = true;
  }
  *has_local = real().getsockname(fd, reinterpret_cast<sockaddr*>(local), &local_len) == 0;
}

}  // namespace

config::Decision decide_connection(int fd, config::Role role, const sockaddr* remote_hint,
                                   socklen_t remote_hint_len, TrackedSocket* socket) {
  SavedErrno keep_errno;
  sockaddr_storage remote{}, local{};
  bool has_remote = false, has_local = false;
  endpoints(fd, remote_hint, remote_hint_len, &local, &has_local, &remote, &has_remote);
  config::ConnectionFacts facts{role, has_remote ? reinterpret_cast<sockaddr*>(&remote) : nullptr,
                                has_local ? reinterpret_cast<sockaddr*>(&local) : nullptr};
  config::Decision decision = process_rules().match(facts);
  if (socket != nullptr) stats_decided(socket, fd, role, decision, facts.local, facts.remote);
  return decision;
}

void describe_connection(int fd, config::Role role, const config::Decision& decision, char* out, size_t size,
                         const sockaddr* remote_hint, socklen_t remote_hint_len) {
  SavedErrno keep_errno;
  sockaddr_storage remote{}, local{};
  bool has_remote = false, has_local = false;
  endpoints(fd, remote_hint, remote_hint_len, &local, &has_local, &remote, &has_remote);
  char from[64], to[64];
  format_endpoint(local, has_local, from, sizeof from);
  format_endpoint(remote, has_remote, to, sizeof to);
  const char* who = role == config::Role::kClient ? "client" : "server";
  if (decision.rule == nullptr) {
    snprintf(out, size, "fd %d %s %s -> %s: no rule matched", fd, who, from, to);
  } else {
    snprintf(out, size, "fd %d %s %s -> %s: rule '%s' says %s", fd, who, from, to, decision.rule->name.c_str(),
             config::to_string(decision.options->transport));
  }
}

void log_connection(int fd, config::Role role, const config::Decision& decision, const char* path,
                    const sockaddr* remote_hint, socklen_t remote_hint_len) {
  if (!log_enabled()) return;
  char label[kConnectionLabelSize];
  describe_connection(fd, role, decision, label, sizeof label, remote_hint, remote_hint_len);
  log_line("%s: %s", label, path);
}

// The size a ring starts with (2^16, 64 KiB) when the rule asks for more: enough for request and
// response traffic at full speed, and a bulk transfer's first bytes fill it within a round trip or two.
constexpr uint32_t kStartRingLog2 = 16;

transport::StreamOptions stream_options(const config::ConnectionOptions& o) {
  transport::StreamOptions s;
  uint32_t log2 = 10;
  while (log2 < 29 && (uint64_t{1} << log2) < o.buffer_size) ++log2;
  s.ring_size_log2 = log2;
  if (log2 > kStartRingLog2) s.start_ring_size_log2 = kStartRingLog2;
  // The ring starts at 64 KiB, grows to the rule's buffer_size when the peer's bytes fill it and goes
  // back when idle (docs/links.md, "Rings that grow and shrink"): a connection that only trades small
  // messages pins 64 KiB and its mirror, not the rule's size, so that pinned memory follows the bulk
  // transfers under way, not the connection count.
  // The peer's ring costs us a bounce buffer as large (pinned): up to 4 times our own, refused beyond.
  s.max_peer_ring_size_log2 = std::min<uint32_t>(log2 + 2, 29);
  s.recv_queue_depth = static_cast<uint16_t>(std::clamp<uint32_t>(o.recv_queue_depth, 4, 255));
  s.send_queue_depth =
      static_cast<uint16_t>(std::clamp<uint32_t>(o.send_queue_depth, 2 * s.recv_queue_depth + 16, 65535));
  s.link_channels = static_cast<uint16_t>(std::clamp<uint32_t>(o.link_channels, 1, 16384));
  // The client waits for its request to be accepted as long as the whole upgrade may take: a server
  // accepts one request at a time, so a burst of connections (iperf -P 4) queues behind the first.
  s.timeout_ms = static_cast<int>(std::max<uint64_t>(std::max(o.connect_timeout_us, o.upgrade_timeout_us) / 1000, 100));
  s.zcopy_threshold = o.zcopy_threshold;
  s.inline_threshold = static_cast<uint32_t>(o.inline_threshold);
  s.keepalive_ms = static_cast<int>(o.keepalive_us / 1000);
  s.busy_poll_us = static_cast<int>(o.busy_poll_us);
  s.busy_poll_adaptive = o.busy_poll_adaptive;
  s.busy_poll_yield = o.busy_poll_yield == config::PollYield::kOn    ? transport::SpinYield::kAlways
                      : o.busy_poll_yield == config::PollYield::kOff ? transport::SpinYield::kNever
                                                                     : transport::SpinYield::kSoftwareDevice;
  // A path that fails hands the connection to the path watcher (back_to_tcp/path_watcher.h), which
  // carries it on over TCP: the application sees a pause, not a reset.
  s.fail_over = true;
  return s;
}

const char* why_not(transport::Status s) {
  switch (s) {
    case transport::Status::kRejected:
      return "the peer has no tcp2rdma listener on that port (rejected; its log says why)";
    case transport::Status::kNoDevice:
      // The libraries are opened by the first transport call, which is what failed here.
      return transport::rdma_libraries_loaded() ? "no RDMA device"
                                                : "no RDMA device (libibverbs or librdmacm cannot be opened)";
    case transport::Status::kAddressInUse: return "another rdma_cm listener holds the RDMA port";
    case transport::Status::kNoRoute: return "no RDMA route to the peer";
    case transport::Status::kMemoryLock: return "cannot register memory (RLIMIT_MEMLOCK)";
    case transport::Status::kResources: return "cannot create RDMA resources";
    case transport::Status::kTimeout: return "the RDMA connection timed out";
    default: return transport::to_string(s);
  }
}


}  // namespace tcp2rdma::preload
