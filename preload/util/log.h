// The module's log: silent unless TCP2RDMA_LOG is set, one line per call, written with the real write(2)
// from a stack buffer (no iostreams, no allocation, no locks), so it is safe in any wrapper.
//   TCP2RDMA_LOG=1 (or stderr)  lines go to standard error
//   TCP2RDMA_LOG=/path/file     lines are appended to that file (tests read it to see the path taken)
#pragma once

namespace tcp2rdma::preload {

bool log_enabled() noexcept;

// printf-style; prefixes "tcp2rdma[pid]: " and appends a newline. Never changes errno.
[[gnu::format(printf, 1, 2)]] void log_line(const char* format, ...) noexcept;

// As log_line, but to standard error even when logging is off: for the few problems a user must see
// (a broken rule file), once per process.
[[gnu::format(printf, 1, 2)]] void log_always(const char* format, ...) noexcept;

}  // namespace tcp2rdma::preload
