// What the machine has for RDMA, read once at the start: devices, their ports and GIDs, and the
// addresses of its interfaces. The device checks judge this record and nothing else, so host tests
// can hand them machines that this host is not.
#pragma once

#include <netinet/in.h>

#include <cstdint>
#include <string>
#include <vector>

namespace tcp2rdma::tools::doctor {

enum class PortKind { kRoce, kInfiniband, kIwarp };

struct Gid {
  uint32_t index = 0;
  in6_addr value{};     // an IPv4 address appears as ::ffff:a.b.c.d (RoCE's form)
  bool roce_v2 = false;  // the type rdma_cm picks when there is one
  std::string netdev;   // the interface whose address made it; empty for InfiniBand
};

struct Port {
  uint32_t number = 0;
  std::string state;    // as ibv_devinfo shows it: "ACTIVE", "DOWN", "INIT"...
  bool active = false;
  PortKind kind = PortKind::kRoce;
  std::string netdev;   // sysfs gid_attrs/ndevs/0; empty when the port has none or it is unreadable
  std::vector<Gid> gids;
};

struct Device {
  std::string name;
  std::string error;  // why it could not be opened or queried; then `ports` is empty
  std::vector<Port> ports;
  bool software = false;  // its work runs on this host's CPUs (transport/device_context.h)
};

struct InterfaceAddress {
  std::string interface;
  std::string text;     // as people write it: "10.77.0.1", "fd77::1"
  in6_addr as_gid{};    // the GID RoCE would make of it
};

struct Inventory {
  std::vector<Device> devices;
  std::string list_error;  // ibv_get_device_list() failed (no kernel support): its errno text
  std::vector<InterfaceAddress> addresses;  // IPv6 link-local ones left out: connections do not use them
};

Inventory read_inventory();

}  // namespace tcp2rdma::tools::doctor
