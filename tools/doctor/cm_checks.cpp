// rdma_cm and peer: the first steps the module takes towards a peer, taken once by hand.
#include <arpa/inet.h>
#include <poll.h>
#include <rdma/rdma_cma.h>

#include <cerrno>
#include <cstring>

#include "checks.h"
#include "deadline.h"
#include "rdma_address.h"

namespace tcp2rdma::tools::doctor {
namespace {

// The module gives rdma_cm the same 2 s (config/options.h, connect_timeout) for each step.
constexpr int kResolveTimeoutMs = 2000;
// The event of a step that timed out comes from the kernel at kResolveTimeoutMs; wait a little longer
// so that it, rather than our own wait, says so.
constexpr int kEventWaitMs = kResolveTimeoutMs + 1000;

// An event channel and one id on it, both released however the check ends.
class CmId {
 public:
  CmId() {
    channel_ = rdma_create_event_channel();
    if (channel_ == nullptr) {
      fail("cannot open the rdma_cm event channel: ");
      return;
    }
    if (rdma_create_id(channel_, &id_, nullptr, RDMA_PS_TCP) != 0) {
      fail("cannot create an rdma_cm id: ");
      id_ = nullptr;
    }
  }
  ~CmId() {
    if (id_ != nullptr) rdma_destroy_id(id_);
    if (channel_ != nullptr) rdma_destroy_event_channel(channel_);
  }
  CmId(const CmId&) = delete;
  CmId& operator=(const CmId&) = delete;

  rdma_cm_id* id() const { return id_; }
  const std::string& error() const { return error_; }
  // librdmacm says ENODEV when it finds no RDMA device at all, though rdma_cm itself is there.
  bool no_device() const { return error_errno_ == ENODEV; }

  // The next event's type and status (a negative errno for the errors), or false after kEventWaitMs.
  bool next_event(rdma_cm_event_type* type, int* status) {
    transport::Deadline deadline = transport::Deadline::in_ms(kEventWaitMs);
    pollfd p{channel_->fd, POLLIN, 0};
    int ready = 0;
    do {
      ready = poll(&p, 1, deadline.poll_ms());
    } while (ready < 0 && errno == EINTR);
    rdma_cm_event* event = nullptr;
    if (ready <= 0 || rdma_get_cm_event(channel_, &event) != 0) return false;
    *type = event->event;
    *status = event->status;
    rdma_ack_cm_event(event);
    return true;
  }

 private:
  void fail(const char* what) {
    error_errno_ = errno;
    error_ = what + std::string(std::strerror(error_errno_));
  }

  rdma_event_channel* channel_ = nullptr;
  rdma_cm_id* id_ = nullptr;
  std::string error_;
  int error_errno_ = 0;
};

// "route error for 10.0.0.2: RDMA_CM_EVENT_ROUTE_ERROR (Connection timed out)"
std::string event_failure(const char* what, const std::string& text, rdma_cm_event_type type, int status) {
  return std::string(what) + " for " + text + ": " + rdma_event_str(type) + " (" +
         std::strerror(status < 0 ? -status : status) + ")";
}

std::string gid_text(const ibv_gid& gid) {
  char text[INET6_ADDRSTRLEN] = "";
  inet_ntop(AF_INET6, gid.raw, text, sizeof text);
  return text;
}

// "rxe0 port 1, source GID ::ffff:10.77.0.1 (index 1)": where the route leaves this machine.
std::string describe_route(rdma_cm_id* id) {
  const ibv_gid& sgid = id->route.num_paths > 0 ? id->route.path_rec[0].sgid : id->route.addr.addr.ibaddr.sgid;
  std::string where = std::string(id->verbs != nullptr ? ibv_get_device_name(id->verbs->device) : "?") + " port " +
                      std::to_string(id->port_num) + ", source GID " + gid_text(sgid);
  if (id->verbs == nullptr) return where;
  ibv_port_attr attr{};
  if (ibv_query_port(id->verbs, id->port_num, &attr) != 0) return where;
  for (int i = 0; i < attr.gid_tbl_len; ++i) {
    ibv_gid gid{};
    if (ibv_query_gid(id->verbs, id->port_num, i, &gid) == 0 && std::memcmp(gid.raw, sgid.raw, sizeof gid.raw) == 0) {
      return where + " (index " + std::to_string(i) + ")";
    }
  }
  return where;
}

constexpr char kNoRouteFix[] =
    "connect to an address that an RDMA device's interface reaches (see addresses; `ip route get <peer>` names "
    "the interface the kernel would use, and it must be an RDMA device's)";
constexpr char kNeighbourFix[] =
    "the peer did not answer address resolution (ARP or neighbour discovery) on the RDMA interface: check it is "
    "up, has that address, and that the link between the two carries traffic (`ping <peer>`)";
constexpr char kRouteFix[] =
    "the RDMA route could not be made: check the device's port is ACTIVE (see ports) and, for InfiniBand, that a "
    "subnet manager runs";

Check resolve_route(CmId& cm, const std::string& text) {
  if (rdma_resolve_route(cm.id(), kResolveTimeoutMs) != 0) {
    return failed("peer", "route error for " + text + ": " + std::strerror(errno), kRouteFix);
  }
  rdma_cm_event_type type{};
  int status = 0;
  if (!cm.next_event(&type, &status)) return failed("peer", "no answer to route resolution for " + text, kRouteFix);
  if (type != RDMA_CM_EVENT_ROUTE_RESOLVED) {
    return failed("peer", event_failure("route error", text, type, status), kRouteFix);
  }
  return passed("peer", text + " resolves through " + describe_route(cm.id()));
}

}  // namespace

Check check_rdma_cm() {
  CmId cm;
  if (cm.no_device()) return failed("rdma_cm", cm.error() + " (librdmacm finds no RDMA device)", "see devices");
  if (!cm.error().empty()) {
    return failed("rdma_cm", cm.error(),
                  "`modprobe rdma_ucm` and check /dev/infiniband/rdma_cm (see device files); inside a container, "
                  "pass the RDMA devices in (--device /dev/infiniband)");
  }
  return passed("rdma_cm", "an rdma_cm event channel and id can be created");
}

Check check_peer(const sockaddr_storage& peer, const std::string& text) {
  CmId cm;
  if (!cm.error().empty()) return failed("peer", "cannot ask rdma_cm about " + text + ": " + cm.error(), "see rdma_cm");
  // As the module does: an IPv4-mapped address is resolved as the IPv4 address it is.
  sockaddr_storage target = transport::rdma_address(reinterpret_cast<const sockaddr*>(&peer));
  if (rdma_resolve_addr(cm.id(), nullptr, reinterpret_cast<sockaddr*>(&target), kResolveTimeoutMs) != 0) {
    return failed("peer", "no RDMA route to " + text + ": " + std::strerror(errno), kNoRouteFix);
  }
  rdma_cm_event_type type{};
  int status = 0;
  if (!cm.next_event(&type, &status)) {
    return failed("peer", "no answer to address resolution for " + text, kNeighbourFix);
  }
  if (type != RDMA_CM_EVENT_ADDR_RESOLVED) {
    return failed("peer", event_failure("address resolution error", text, type, status),
                  status == -ENETUNREACH || status == -ENODEV ? kNoRouteFix : kNeighbourFix);
  }
  return resolve_route(cm, text);
}

}  // namespace tcp2rdma::tools::doctor
