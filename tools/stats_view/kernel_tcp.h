// The kernel's own byte counts of TCP sockets (sock_diag, as `ss -ti` reads them): what `stat` shows
// for a connection that is on TCP, where the module does not count (docs/stats.md). Free for the
// application: only the reader asks, one dump per look.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "stats/stats_reader.h"

namespace tcp2rdma::tools::stats_view {

struct KernelTcpBytes {
  uint64_t in = 0;   // tcpi_bytes_received, less the peer's FIN once it came
  uint64_t out = 0;  // tcpi_bytes_sent less tcpi_bytes_retrans: each byte once, acknowledged or not
};

// Every TCP socket of this network namespace, by "LOCAL|REMOTE" as stats::format_address writes
// them. Empty when sock_diag cannot be asked.
std::unordered_map<std::string, KernelTcpBytes> kernel_tcp_bytes();

// Rows on tcp or back-on-tcp take the kernel's counts (the application's bytes on TCP, whole); rows on
// RDMA or switching keep the module's (the bytes before the switch: the kernel's would add the
// switch's own records).
void use_kernel_tcp_bytes(std::vector<stats::ProcessView>* views);

}  // namespace tcp2rdma::tools::stats_view
