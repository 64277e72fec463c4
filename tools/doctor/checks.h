// The checks of `tcp2rdma doctor`, in the order it runs them (docs/doctor.md). Each returns one Check;
// none exits or throws. The device checks judge an Inventory only, so tests can hand them any machine.
#pragma once

#include <sys/socket.h>

#include <string>

#include "inventory.h"
#include "memlock_budget.h"
#include "report.h"
#include "rule_loader.h"

namespace tcp2rdma::tools::doctor {

Check check_devices(const Inventory& inventory);
Check check_ports(const Inventory& inventory);
Check check_addresses(const Inventory& inventory);
// dir: where the device files are (/dev/infiniband; tests pass their own).
Check check_device_files(const std::string& dir);
Check check_memlock(const RingPlan& plan);
Check check_rdma_cm();
Check check_module(const std::string& path);

// The rule file doctor judges: --rules, else the one the module would read (TCP2RDMA_RULES, else
// /etc/tcp2rdma/rules.yaml if it exists). `path` empty: there is none.
struct RuleFile {
  std::string path;
  std::string source;  // how it was chosen: "--rules", "TCP2RDMA_RULES", the default path
  config::LoadResult loaded;
};
RuleFile find_rule_file(const std::string& from_option);
Check check_rules(const RuleFile& rules);
// The largest buffer_size of the rules that select RDMA; 0 when no rule does (or no file loaded).
uint64_t largest_rdma_buffer(const RuleFile& rules);

// `peer` is an address literal the user gave (doctor contacts nothing else).
Check check_peer(const sockaddr_storage& peer, const std::string& text);

}  // namespace tcp2rdma::tools::doctor
