// devices, ports, addresses and device files: what the kernel offers a program that wants RDMA.
#include <dirent.h>
#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "checks.h"

namespace tcp2rdma::tools::doctor {
namespace {

constexpr char kDriverFix[] =
    "load the driver of the RDMA NIC (e.g. `modprobe mlx5_ib`), or make a Soft-RoCE device on an Ethernet "
    "interface: `modprobe rdma_rxe && rdma link add rxe0 type rxe netdev <iface>`";

std::string join(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& part : parts) out += (out.empty() ? "" : ", ") + part;
  return out;
}

std::string port_label(const Device& device, const Port& port) {
  return device.name + " port " + std::to_string(port.number);
}

const Gid* gid_holding(const Port& port, const InterfaceAddress& address) {
  const Gid* found = nullptr;
  for (const Gid& gid : port.gids) {
    if (std::memcmp(&gid.value, &address.as_gid, sizeof gid.value) != 0) continue;
    if (!gid.netdev.empty() && gid.netdev != address.interface) continue;
    if (found == nullptr || (gid.roce_v2 && !found->roce_v2)) found = &gid;  // rdma_cm prefers v2
  }
  return found;
}

// Where rdma_cm can take an address: the first RoCE port holding it as a GID.
std::string where_held(const Inventory& inventory, const InterfaceAddress& address) {
  for (const Device& device : inventory.devices) {
    for (const Port& port : device.ports) {
      if (port.kind != PortKind::kRoce) continue;
      if (const Gid* gid = gid_holding(port, address)) {
        return port_label(device, port) + ", GID " + std::to_string(gid->index) +
               (gid->roce_v2 ? ", RoCE v2" : ", RoCE v1");
      }
    }
  }
  return "";
}

bool on_roce_interface(const Inventory& inventory, const std::string& interface) {
  for (const Device& device : inventory.devices) {
    for (const Port& port : device.ports) {
      if (port.kind != PortKind::kRoce) continue;
      if (port.netdev == interface) return true;
      for (const Gid& gid : port.gids) {
        if (gid.netdev == interface) return true;
      }
    }
  }
  return false;
}

// InfiniBand and iWARP ports reach their peers through the addresses of an interface that GIDs do not
// name (IPoIB, the iWARP NIC's own): doctor cannot tie them to the device, so it says so.
std::vector<std::string> unjudged_ports(const Inventory& inventory) {
  std::vector<std::string> out;
  for (const Device& device : inventory.devices) {
    for (const Port& port : device.ports) {
      if (port.kind == PortKind::kInfiniband) out.push_back(port_label(device, port) + " (InfiniBand: via IPoIB)");
      if (port.kind == PortKind::kIwarp) out.push_back(port_label(device, port) + " (iWARP)");
    }
  }
  return out;
}

std::string user_name() {
  const passwd* entry = getpwuid(getuid());
  return (entry != nullptr ? std::string(entry->pw_name) + ", " : std::string()) + "uid " + std::to_string(getuid());
}

// "uverbs0 (mode 0600, root:rdma)": what the fix has to change.
std::string file_owner(const std::string& dir, const std::string& name) {
  struct stat st {};
  if (stat((dir + "/" + name).c_str(), &st) != 0) return name;
  const passwd* owner = getpwuid(st.st_uid);
  const group* grp = getgrgid(st.st_gid);
  char mode[8];
  std::snprintf(mode, sizeof mode, "%04o", st.st_mode & 07777);
  return name + " (mode " + mode + ", " + (owner != nullptr ? owner->pw_name : std::to_string(st.st_uid)) + ":" +
         (grp != nullptr ? grp->gr_name : std::to_string(st.st_gid)) + ")";
}

std::vector<std::string> uverbs_files(DIR* dir) {
  std::vector<std::string> names;
  while (const dirent* entry = readdir(dir)) {
    if (std::strncmp(entry->d_name, "uverbs", 6) == 0) names.emplace_back(entry->d_name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

Check check_devices(const Inventory& inventory) {
  if (inventory.devices.empty()) {
    std::string finding = "no RDMA device";
    if (!inventory.list_error.empty()) finding += " (libibverbs: " + inventory.list_error + ")";
    return failed("devices", finding, kDriverFix);
  }
  std::vector<std::string> names;
  for (const Device& device : inventory.devices) {
    size_t ports = device.ports.size();
    std::string count = std::to_string(ports) + (ports == 1 ? " port" : " ports");
    // A software device's spin yields the CPU between polls (rules.md, busy_poll_yield).
    std::string kind = device.software ? ", software: runs on this host's CPUs" : "";
    names.push_back(device.name + " (" + (device.error.empty() ? count : device.error) + kind + ")");
  }
  return passed("devices", join(names));
}

Check check_ports(const Inventory& inventory) {
  if (inventory.devices.empty()) return failed("ports", "no RDMA device, so no port", "see devices");
  std::vector<std::string> good, bad, fixes;
  for (const Device& device : inventory.devices) {
    if (!device.error.empty()) {
      bad.push_back(device.name + ": " + device.error);
      fixes.push_back("see device files");
    }
    for (const Port& port : device.ports) {
      std::string netdev = port.netdev.empty() ? "" : " (" + port.netdev + ")";
      if (port.active) {
        good.push_back(port_label(device, port) + " ACTIVE" + netdev);
        continue;
      }
      bad.push_back(port_label(device, port) + " is " + port.state + netdev);
      fixes.push_back(port.netdev.empty() ? "check the port's link (cable, switch)"
                                          : "bring " + port.netdev + " up (`ip link set " + port.netdev +
                                                " up`) and check its link: a RoCE port follows its interface");
      if (port.kind == PortKind::kInfiniband && port.state == "INIT") fixes.push_back("run a subnet manager (opensm)");
    }
  }
  if (bad.empty()) return passed("ports", join(good));
  std::vector<std::string> all = bad;
  all.insert(all.end(), good.begin(), good.end());
  return failed("ports", join(all), join(fixes));
}

Check check_addresses(const Inventory& inventory) {
  if (inventory.devices.empty()) return failed("addresses", "no RDMA device, so no RDMA address", "see devices");
  std::vector<std::string> held, missing;
  for (const InterfaceAddress& address : inventory.addresses) {
    if (!on_roce_interface(inventory, address.interface)) continue;
    std::string where = where_held(inventory, address);
    if (where.empty()) {
      missing.push_back(address.text + " on " + address.interface);
    } else {
      held.push_back(address.text + " (" + where + ")");
    }
  }
  std::vector<std::string> unjudged = unjudged_ports(inventory);
  std::string not_held = missing.empty() ? "" : "; no GID holds " + join(missing);
  std::string not_judged = unjudged.empty() ? "" : "; not checked: " + join(unjudged);
  if (!held.empty()) {
    std::string finding = "connections go over RDMA only between such addresses: " + join(held) + not_held + not_judged;
    return missing.empty() ? passed("addresses", finding) : warned("addresses", finding);
  }
  if (!unjudged.empty()) return warned("addresses", "no RoCE address" + not_held + not_judged);
  return failed("addresses",
                "no address of an RDMA device's interface has a GID" +
                    (missing.empty() ? std::string(" (the interfaces have no IPv4 or global IPv6 address)") : not_held),
                "give the RDMA device's interface an address (`ip addr add 10.0.0.1/24 dev <iface>`): RoCE makes a "
                "GID of each address of its interface; `rdma link` shows which interface each device is on");
}

Check check_rule_addresses(const Inventory& inventory, const RuleFile& rules) {
  std::vector<std::string> held, empty, remote;
  for (const config::Rule* rule : rules_selecting_rdma(rules)) {
    for (const config::Cidr& block : rule->local) {
      std::vector<std::string> inside;
      for (const InterfaceAddress& address : inventory.addresses) {
        config::Ip6 ip;
        std::memcpy(ip.data(), address.as_gid.s6_addr, ip.size());
        if (block.contains(ip) && !where_held(inventory, address).empty()) inside.push_back(address.text);
      }
      std::string named = rule->name + ": local " + block.to_string();
      if (inside.empty()) {
        empty.push_back(named);
      } else {
        held.push_back(named + " (" + join(inside) + ")");
      }
    }
    for (const config::Cidr& block : rule->remote) remote.push_back(block.to_string());
  }
  std::string peers = remote.empty() ? "" : "; remote " + join(remote) + ": the peers' (check one with --peer ADDR)";
  if (held.empty() && empty.empty()) {
    return passed("rule addresses", "no rule that selects RDMA names local addresses" + peers);
  }
  if (empty.empty()) return passed("rule addresses", "RoCE has GIDs in " + join(held) + peers);
  return warned("rule addresses", "no address RoCE has a GID for in " + join(empty) +
                                      ": such connections stay TCP on this machine" +
                                      (held.empty() ? "" : "; GIDs in " + join(held)) + peers);
}

Check check_device_files(const std::string& dir) {
  DIR* listing = opendir(dir.c_str());
  if (listing == nullptr) {
    return failed("device files", dir + " does not exist",
                  "load the modules that make its files: `modprobe ib_uverbs rdma_ucm` (and an RDMA driver, see "
                  "devices)");
  }
  std::vector<std::string> files = uverbs_files(listing);
  closedir(listing);
  if (files.empty()) {
    return failed("device files", "no " + dir + "/uverbs*", "`modprobe ib_uverbs` (and an RDMA driver, see devices)");
  }
  if (access((dir + "/rdma_cm").c_str(), F_OK) != 0) {
    return failed("device files", "no " + dir + "/rdma_cm", "`modprobe rdma_ucm`");
  }
  files.push_back("rdma_cm");
  std::vector<std::string> denied;
  for (const std::string& name : files) {
    if (access((dir + "/" + name).c_str(), R_OK | W_OK) != 0) denied.push_back(file_owner(dir, name));
  }
  if (denied.empty()) return passed("device files", join(files) + " in " + dir + ": this user can read and write them");
  return failed("device files",
                "this user (" + user_name() + ") cannot open for reading and writing in " + dir + ": " + join(denied),
                "add the user to the group that owns them (`usermod -aG <group> <user>`, then log in again), or give "
                "them mode 0666 with a udev rule (/etc/udev/rules.d/70-rdma.rules: `KERNEL==\"uverbs*\", "
                "MODE=\"0666\"` and `KERNEL==\"rdma_cm\", MODE=\"0666\"`, then `udevadm trigger`)");
}

}  // namespace tcp2rdma::tools::doctor
