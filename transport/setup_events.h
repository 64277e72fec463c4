// Waiting for librdmacm's connection events during setup (stream_setup.cpp, stream_listener.cpp).
#pragma once

#include <rdma/rdma_cma.h>

#include "status.h"
#include "wire.h"

namespace tcp2rdma::transport {

// The next event on `channel` within `timeout_ms` (-1: no limit).
Status next_cm_event(rdma_event_channel* channel, int timeout_ms, rdma_cm_event** event);
// What an unexpected event means for the caller.
Status status_of_cm_event(rdma_cm_event_type type);
// Waits for `want`; any other event is the failure it stands for.
Status expect_cm_event(rdma_event_channel* channel, int timeout_ms, rdma_cm_event_type want);
// Waits for the server's response to our connect (CONNECT_RESPONSE: the queue pair is ours, so
// librdmacm leaves its moves and the establishment to us) and copies the peer's AcceptReply out of it.
// On a rejection (kRejected) the rejection's private data is copied to *redirect when it is long
// enough to be one (else zeroed).
Status expect_response(rdma_event_channel* channel, int timeout_ms, AcceptReply* reply, Redirect* redirect);

}  // namespace tcp2rdma::transport
