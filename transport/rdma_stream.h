// A reliable byte stream over one RC queue pair: setup with librdmacm, data by RDMA Write with
// immediate into the peer's ring, credits through the mailbox (docs/protocol.md).
// First cut: blocking calls, one thread per stream, bytes copied through a registered bounce buffer.
#pragma once

#include <rdma/rdma_cma.h>
#include <sys/uio.h>

#include <cstdint>
#include <memory>

#include "flow_control.h"
#include "status.h"
#include "wire.h"

namespace tcp2rdma::transport {

struct StreamOptions {
  uint32_t ring_size_log2 = 20;  // 1 MiB receive ring
  uint16_t recv_queue_depth = 64;
  uint16_t send_queue_depth = 160;  // data (bounded by the peer's receives) plus mailbox updates and wakeups
  int timeout_ms = 5000;
};

class RdmaStream;

// Listens with librdmacm on a port and accepts streams.
class StreamListener {
 public:
  static Status listen(const sockaddr* address, const StreamOptions& options, std::unique_ptr<StreamListener>* out);
  ~StreamListener();
  Status accept(std::unique_ptr<RdmaStream>* out);

 private:
  StreamListener() = default;
  rdma_event_channel* channel_ = nullptr;
  rdma_cm_id* id_ = nullptr;
  StreamOptions options_;
};

class RdmaStream {
 public:
  static Status connect(const sockaddr* address, const StreamOptions& options, std::unique_ptr<RdmaStream>* out);
  ~RdmaStream();
  RdmaStream(const RdmaStream&) = delete;
  RdmaStream& operator=(const RdmaStream&) = delete;

  // Blocks until at least one byte was taken; returns the count in *done.
  Status write(const iovec* iov, int iovcnt, size_t* done);
  // Blocks until at least one byte is there or the peer closed (*done == 0: end of stream).
  Status read(const iovec* iov, int iovcnt, size_t* done);
  // Sends what is pending, then an orderly close, and waits (bounded) for the peer's.
  Status close();

  uint64_t bytes_sent() const { return flow_->sent(); }
  uint64_t wakeups_received() const { return wakeups_received_; }

 private:
  friend class StreamListener;
  RdmaStream() = default;

  // Setup, shared by both ends: resources on `id`, then our SetupInfo for the private data.
  Status create_resources(rdma_cm_id* id, const StreamOptions& options);
  SetupInfo local_setup() const;
  Status start(const SetupInfo& peer);

  // Progress: completions, the mailbox, credit updates and wakeups owed.
  Status progress();
  Status wait_for_event();
  Status handle_cm_event();
  Status handle_completion(const ibv_wc& wc);
  Status post_write(uint64_t local_offset, uint32_t length, uint64_t remote_offset, uint32_t imm, bool with_imm,
                    ibv_mr* local_mr);
  Status send_credits();
  Status request_wakeup();
  bool read_mailbox(MailboxUpdate* update);
  Status post_receive();

  StreamOptions options_;
  rdma_event_channel* cm_channel_ = nullptr;
  rdma_cm_id* id_ = nullptr;
  ibv_comp_channel* comp_channel_ = nullptr;
  ibv_cq* cq_ = nullptr;
  uint8_t* ring_ = nullptr;  // our receive ring, then our mailbox
  ibv_mr* ring_mr_ = nullptr;
  uint8_t* bounce_ = nullptr;  // staging for our outgoing bytes, mirrors the peer's ring offsets
  ibv_mr* bounce_mr_ = nullptr;
  uint8_t* mailbox_out_ = nullptr;  // what we write into the peer's mailbox
  ibv_mr* mailbox_out_mr_ = nullptr;
  uint64_t ring_size_ = 0;
  uint64_t peer_ring_size_ = 0;
  uint64_t peer_ring_addr_ = 0;
  uint32_t peer_rkey_ = 0;
  uint64_t first_byte_ = 0;
  uint64_t mailbox_seq_ = 0;
  uint64_t last_mailbox_seq_read_ = 0;
  int sends_outstanding_ = 0;
  uint64_t wakeups_received_ = 0;
  bool failed_ = false;
  bool disconnected_ = false;
  std::unique_ptr<FlowControl> flow_;
};

}  // namespace tcp2rdma::transport
