#include "setup_events.h"

#include <poll.h>

#include <cerrno>
#include <cstring>

#include "deadline.h"
#include "os_calls.h"

namespace tcp2rdma::transport {

Status next_cm_event(rdma_event_channel* channel, int timeout_ms, rdma_cm_event** event) {
  pollfd p{channel->fd, POLLIN, 0};
  int ready = 0;
  auto deadline = Deadline::in_ms(timeout_ms);  // a signal does not start the wait over
  do {
    ready = os().poll(&p, 1, deadline.poll_ms());
  } while (ready < 0 && errno == EINTR);
  if (ready == 0) return Status::kTimeout;
  if (ready < 0 || rdma_get_cm_event(channel, event) != 0) return Status::kReset;
  return Status::kOk;
}

Status status_of_cm_event(rdma_cm_event_type type) {
  switch (type) {
    case RDMA_CM_EVENT_ADDR_ERROR:
    case RDMA_CM_EVENT_ROUTE_ERROR:
    case RDMA_CM_EVENT_UNREACHABLE:
      return Status::kNoRoute;
    case RDMA_CM_EVENT_REJECTED:
      return Status::kRejected;
    case RDMA_CM_EVENT_DEVICE_REMOVAL:
      return Status::kNoDevice;
    default:
      return Status::kReset;
  }
}

Status expect_cm_event(rdma_event_channel* channel, int timeout_ms, rdma_cm_event_type want) {
  rdma_cm_event* event = nullptr;
  if (Status s = next_cm_event(channel, timeout_ms, &event); s != Status::kOk) return s;
  rdma_cm_event_type type = event->event;
  rdma_ack_cm_event(event);
  return type == want ? Status::kOk : status_of_cm_event(type);
}

Status expect_response(rdma_event_channel* channel, int timeout_ms, AcceptReply* reply, Redirect* redirect) {
  *redirect = Redirect{};
  rdma_cm_event* event = nullptr;
  if (Status s = next_cm_event(channel, timeout_ms, &event); s != Status::kOk) return s;
  rdma_cm_event_type type = event->event;
  bool whole = event->param.conn.private_data_len >= sizeof *reply;
  if (type == RDMA_CM_EVENT_CONNECT_RESPONSE && whole) std::memcpy(reply, event->param.conn.private_data, sizeof *reply);
  if (type == RDMA_CM_EVENT_REJECTED && event->param.conn.private_data != nullptr &&
      event->param.conn.private_data_len >= sizeof *redirect) {
    std::memcpy(redirect, event->param.conn.private_data, sizeof *redirect);
  }
  rdma_ack_cm_event(event);
  if (type != RDMA_CM_EVENT_CONNECT_RESPONSE) return status_of_cm_event(type);
  return whole ? Status::kOk : Status::kProtocolError;
}

}  // namespace tcp2rdma::transport
