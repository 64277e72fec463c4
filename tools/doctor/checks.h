// The checks of `tcp2rdma doctor`, in the order it runs them (docs/doctor.md). Each returns one Check;
// none exits or throws. The device checks judge an Inventory only, so tests can hand them any machine.
#pragma once

#include <sys/socket.h>

#include <string>
#include <vector>

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
// RLIMIT_NOFILE as a server started from here gets it: with soft = hard and no privilege to raise the
// hard limit, the module's descriptors come from the top of the application's range
// (transport/own_descriptors.h), which it should know. judge_descriptors is the judgement alone.
Check check_descriptors();
Check judge_descriptors(unsigned long soft, unsigned long hard, bool may_raise_hard);
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
// The rules of the file that select RDMA, in its order; none when no file loaded.
std::vector<const config::Rule*> rules_selecting_rdma(const RuleFile& rules);
// Whether the `local` blocks the RDMA rules name hold addresses RoCE has GIDs for (rdma_cm can only
// use those): a block that holds none warns, its connections stay TCP on this machine. `remote` blocks
// are the peers' addresses, judged on the peers (or one of them with --peer).
Check check_rule_addresses(const Inventory& inventory, const RuleFile& rules);

// `peer` is an address literal the user gave (doctor contacts nothing else).
Check check_peer(const sockaddr_storage& peer, const std::string& text);

}  // namespace tcp2rdma::tools::doctor
