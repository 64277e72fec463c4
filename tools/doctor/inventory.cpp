#include "inventory.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <infiniband/verbs.h>
#include <net/if.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <span>
#include <string_view>

#include "device_context.h"

namespace tcp2rdma::tools::doctor {
namespace {

std::string first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string port_sysfs(const std::string& device, uint32_t port) {
  return "/sys/class/infiniband/" + device + "/ports/" + std::to_string(port);
}

std::string interface_name(uint32_t ifindex) {
  char name[IF_NAMESIZE];
  return ifindex != 0 && if_indextoname(ifindex, name) != nullptr ? name : "";
}

std::string state_name(ibv_port_state state) {
  std::string_view name = ibv_port_state_str(state);
  if (name.starts_with("PORT_")) name.remove_prefix(5);
  return std::string(name);
}

PortKind kind_of(const ibv_device* device, const ibv_port_attr& attr) {
  if (device->transport_type == IBV_TRANSPORT_IWARP) return PortKind::kIwarp;
  return attr.link_layer == IBV_LINK_LAYER_INFINIBAND ? PortKind::kInfiniband : PortKind::kRoce;
}

Gid gid_of(const ibv_gid& raw, uint32_t index) {
  Gid gid;
  gid.index = index;
  std::memcpy(&gid.value, raw.raw, sizeof gid.value);
  return gid;
}

// The whole table in one call, with each entry's type and interface; a kernel without the call is
// answered by libibverbs from sysfs.
bool read_gid_table(ibv_context* context, size_t capacity, std::vector<Port>* ports) {
  std::vector<ibv_gid_entry> table(capacity);
  ssize_t n = ibv_query_gid_table(context, table.data(), table.size(), 0);
  if (n < 0) return false;
  for (const ibv_gid_entry& entry : std::span(table.data(), static_cast<size_t>(n))) {
    for (Port& port : *ports) {
      if (port.number != entry.port_num) continue;
      Gid gid = gid_of(entry.gid, entry.gid_index);
      gid.roce_v2 = entry.gid_type == IBV_GID_TYPE_ROCE_V2;
      gid.netdev = interface_name(entry.ndev_ifindex);
      port.gids.push_back(std::move(gid));
    }
  }
  return true;
}

// The older way, one index at a time, when the table call fails: the type from sysfs, the interface
// taken to be the port's.
void read_gids_one_by_one(ibv_context* context, const std::string& device, uint32_t table_length, Port* port) {
  static constexpr ibv_gid kEmpty{};
  for (uint32_t i = 0; i < table_length; ++i) {
    ibv_gid raw{};
    if (ibv_query_gid(context, static_cast<uint8_t>(port->number), static_cast<int>(i), &raw) != 0) continue;
    if (std::memcmp(raw.raw, kEmpty.raw, sizeof raw.raw) == 0) continue;
    Gid gid = gid_of(raw, i);
    gid.roce_v2 = first_line(port_sysfs(device, port->number) + "/gid_attrs/types/" + std::to_string(i)) == "RoCE v2";
    gid.netdev = port->netdev;
    port->gids.push_back(std::move(gid));
  }
}

void read_ports(ibv_device* device, ibv_context* context, Device* out) {
  ibv_device_attr attr{};
  if (int e = ibv_query_device(context, &attr); e != 0) {
    out->error = std::string("cannot query it: ") + std::strerror(e);
    return;
  }
  std::vector<uint32_t> table_lengths;
  size_t capacity = 0;
  for (uint32_t p = 1; p <= attr.phys_port_cnt; ++p) {
    ibv_port_attr port_attr{};
    if (int e = ibv_query_port(context, static_cast<uint8_t>(p), &port_attr); e != 0) {
      out->error = "cannot query port " + std::to_string(p) + ": " + std::strerror(e);
      return;
    }
    Port port;
    port.number = p;
    port.state = state_name(port_attr.state);
    port.active = port_attr.state == IBV_PORT_ACTIVE;
    port.kind = kind_of(device, port_attr);
    port.netdev = first_line(port_sysfs(out->name, p) + "/gid_attrs/ndevs/0");
    out->ports.push_back(std::move(port));
    table_lengths.push_back(static_cast<uint32_t>(port_attr.gid_tbl_len));
    capacity += static_cast<size_t>(port_attr.gid_tbl_len);
  }
  if (!read_gid_table(context, capacity, &out->ports)) {
    for (size_t i = 0; i < out->ports.size(); ++i) {
      read_gids_one_by_one(context, out->name, table_lengths[i], &out->ports[i]);
    }
  }
  for (Port& port : out->ports) {
    if (port.netdev.empty() && !port.gids.empty()) port.netdev = port.gids.front().netdev;
  }
}

Device read_device(ibv_device* device) {
  Device out;
  out.name = ibv_get_device_name(device);
  out.software = transport::runs_on_host_cpus(device->ibdev_path);
  ibv_context* context = ibv_open_device(device);
  if (context == nullptr) {
    out.error = std::string("cannot open it: ") + std::strerror(errno);
    return out;
  }
  read_ports(device, context, &out);
  ibv_close_device(context);
  return out;
}

void read_devices(Inventory* inventory) {
  int count = 0;
  errno = 0;
  ibv_device** list = ibv_get_device_list(&count);
  if (list == nullptr) {
    inventory->list_error = std::strerror(errno != 0 ? errno : ENODEV);
    return;
  }
  for (int i = 0; i < count; ++i) inventory->devices.push_back(read_device(list[i]));
  ibv_free_device_list(list);
}

void read_addresses(Inventory* inventory) {
  ifaddrs* all = nullptr;
  if (getifaddrs(&all) != 0) return;
  for (ifaddrs* a = all; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr) continue;
    InterfaceAddress address;
    address.interface = a->ifa_name;
    char text[INET6_ADDRSTRLEN] = "";
    if (a->ifa_addr->sa_family == AF_INET) {
      const in_addr& v4 = reinterpret_cast<const sockaddr_in*>(a->ifa_addr)->sin_addr;
      inet_ntop(AF_INET, &v4, text, sizeof text);
      address.as_gid.s6_addr[10] = 0xff;
      address.as_gid.s6_addr[11] = 0xff;
      std::memcpy(&address.as_gid.s6_addr[12], &v4, 4);
    } else if (a->ifa_addr->sa_family == AF_INET6) {
      const in6_addr& v6 = reinterpret_cast<const sockaddr_in6*>(a->ifa_addr)->sin6_addr;
      if (IN6_IS_ADDR_LINKLOCAL(&v6)) continue;
      inet_ntop(AF_INET6, &v6, text, sizeof text);
      address.as_gid = v6;
    } else {
      continue;
    }
    address.text = text;
    inventory->addresses.push_back(std::move(address));
  }
  freeifaddrs(all);
}

}  // namespace

Inventory read_inventory() {
  Inventory inventory;
  read_devices(&inventory);
  read_addresses(&inventory);
  return inventory;
}

}  // namespace tcp2rdma::tools::doctor
