// The line between a process and a child it forked while some of its connections were on RDMA
// (docs/architecture.md, "Forks"): a SOCK_SEQPACKET socket pair made just before the fork, one end
// kept by each. The child asks for a connection it inherited (a claim: the stream's serial); the
// parent moves the connection back to TCP and answers with the peer's bytes that were on the stream
// unread, in a memfd passed along (SCM_RIGHTS), which the child reads before the kernel's. The parent
// also answers without being asked when it exits or execs, since it cannot answer later. A closed
// end says the other process is gone (exited, exec'd: both ends are close-on-exec).
#pragma once

#include <cstdint>

#include "registry/lent_streams.h"

namespace tcp2rdma::preload {

// A pair of connected ends, both close-on-exec, or false (errno) when none can be had.
bool open_fork_channel(int ends[2]) noexcept;

// The child's claim of the connection `serial`; `reading`: the call that claims only reads (the parent
// may answer with a read relay: back_to_tcp/read_relay.h). False when the parent's end is gone.
bool send_claim(int channel, uint64_t serial, bool reading = false) noexcept;
// The child's question about a connection it claimed while the parent still held it: has the parent
// let go since (answered kMoved, without bytes, `alone` the verdict)?
bool send_ask(int channel, uint64_t serial) noexcept;
// The parent's answer about `serial` (bytes in a memfd when there are any). False when the child's end
// is gone or no memfd can be had (the child then reads no answer for it: its claim fails loudly).
bool send_answer(int channel, uint64_t serial, const HandBack& answer) noexcept;

// One message from the channel, waiting up to `timeout_ms` (-1: for ever). kClaim, kAsk and kAnswer
// fill *serial (and *answer; a claim says in answer->outcome kRelayed that it only reads); kNone: nothing came in time; kClosed: the other end is gone or broke the
// format (a process of the same program, but the read is checked all the same).
enum class ChannelMessage : uint8_t { kNone, kClaim, kAsk, kAnswer, kClosed };
ChannelMessage receive_message(int channel, int timeout_ms, uint64_t* serial, HandBack* answer) noexcept;

}  // namespace tcp2rdma::preload
