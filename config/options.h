// What a rule decides for one connection: the transport, how the upgrade happens, and the tunables the
// transport uses. A plain struct of fixed-size fields, so the data path can copy it freely.
// The defaults here are the built-in ones documented in docs/rules.md.
#pragma once

#include <cstdint>

namespace tcp2rdma::config {

enum class Transport : uint8_t { kTcp, kRdma };

enum class UpgradeMode : uint8_t {
  kBackground,    // connect()/accept() return at TCP speed; the stream moves to RDMA when it can
  kBeforeReturn,  // connect()/accept() return once the upgrade succeeded or failed (then TCP)
  kRequired,      // as before-return, but a failed upgrade fails the connection instead of staying TCP
};

// What a fork does to a connection that is on RDMA (the child cannot use the parent's RDMA resources).
enum class ForkMode : uint8_t {
  kTcp,     // lent to the child: back on its TCP socket when the child uses it, for both processes
  kParent,  // it stays on RDMA in the parent; the child's copy fails loudly (ENOTCONN, EPIPE)
};

// Whether a spin gives the CPU away between its polls (sched_yield): a software device's work (Soft-RoCE,
// Soft-iWARP) runs on the host's own CPUs, which a spin would take from it; a NIC's runs on the NIC.
enum class PollYield : uint8_t {
  kAuto,  // yield on a software device only
  kOn,    // always
  kOff,   // never
};

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * kKiB;
constexpr uint64_t kMicrosPerMilli = 1000;
constexpr uint64_t kMicrosPerSecond = 1000 * kMicrosPerMilli;

struct ConnectionOptions {
  Transport transport = Transport::kTcp;
  UpgradeMode upgrade = UpgradeMode::kBackground;
  ForkMode on_fork = ForkMode::kTcp;
  uint64_t buffer_size = 1 * kMiB;           // receive ring per direction
  uint64_t zcopy_threshold = 64 * kKiB;      // writes this large go by zero-copy RDMA Write
  uint64_t inline_threshold = 64;            // sends this small go inline in the work request
  uint32_t send_queue_depth = 128;
  uint32_t recv_queue_depth = 128;
  uint32_t link_channels = 96;  // connections a link (one queue pair to a peer process) is sized for
  uint64_t connect_timeout_us = 2 * kMicrosPerSecond;   // rdma_cm address/route/connect
  uint64_t upgrade_timeout_us = 5 * kMicrosPerSecond;   // whole upgrade, then the connection stays TCP
  uint64_t keepalive_us = 10 * kMicrosPerSecond;        // idle time before a liveness probe
  // A background upgrade of a client whose process is already linked to the server: how long the
  // application's call waits for the connection to be on RDMA (0: not at all; docs/links.md).
  uint64_t linked_wait_us = 50 * kMicrosPerMilli;
  // How long a thread that waits for a connection on RDMA polls before it sleeps (0: not at all), and
  // whether an event loop's wait adapts it to how soon messages come (docs/protocol.md, "Polling
  // before sleeping").
  uint64_t busy_poll_us = 1 * kMicrosPerMilli;
  bool busy_poll_adaptive = true;
  PollYield busy_poll_yield = PollYield::kAuto;

  bool operator==(const ConnectionOptions&) const = default;
};

const char* to_string(Transport transport);
const char* to_string(UpgradeMode mode);
const char* to_string(ForkMode mode);
const char* to_string(PollYield yield);

}  // namespace tcp2rdma::config
