// What the rules say about a new connection, and the one log line that records it. The rules are
// loaded once per process, on the first connection that needs them (not at load time: most processes
// an LD_PRELOAD reaches never open a TCP connection).
#pragma once

#include <sys/socket.h>

#include <cstddef>

#include "options.h"
#include "rdma_stream.h"
#include "rule_set.h"

namespace tcp2rdma::preload {

class TrackedSocket;

// The rules of this process. A rule file or environment variable with a mistake never stops the
// application: one line on standard error (or the TCP2RDMA_LOG file) names the first error, and the
// rules returned keep every connection on TCP.
const config::ProcessRuleSet& process_rules();

// Decides the connection on fd (its addresses read from the kernel). `remote_hint` is the address
// given to connect(): while a non-blocking connect is under way the kernel has no peer address yet.
// Never changes errno.
// With `socket`, the decision takes a slot in the stats segment (registry/connection_stats.h).
config::Decision decide_connection(int fd, config::Role role, const sockaddr* remote_hint = nullptr,
                                   socklen_t remote_hint_len = 0, TrackedSocket* socket = nullptr);

// "10.77.0.2:5201" or "[fd00::1]:5201" into out; "?" when !valid (the kernel has no address for that
// side).
void format_endpoint(const sockaddr_storage& s, bool valid, char* out, size_t size);

// With TCP2RDMA_LOG: one line for the connection: addresses, the rule, what it says, and `path`, the
// way the bytes really go ("upgraded to rdma", "stays tcp (why)"). Never changes errno.
void log_connection(int fd, config::Role role, const config::Decision& decision, const char* path,
                    const sockaddr* remote_hint = nullptr, socklen_t remote_hint_len = 0);

// The first part of that line ("fd 5 client 10.0.0.1:40000 -> 10.0.0.2:5201: rule 'x' says rdma"),
// for a line written later, when the descriptor may be gone (a background upgrade).
inline constexpr size_t kConnectionLabelSize = 256;
void describe_connection(int fd, config::Role role, const config::Decision& decision, char* out, size_t size,
                         const sockaddr* remote_hint = nullptr, socklen_t remote_hint_len = 0);

// The rule's tunables as the transport's stream options: rounded and clamped into what the transport
// accepts.
transport::StreamOptions stream_options(const config::ConnectionOptions& options);

// Why a connection stays TCP, in the log's words, for a transport status that ended its upgrade.
const char* why_not(transport::Status s);

}  // namespace tcp2rdma::preload
