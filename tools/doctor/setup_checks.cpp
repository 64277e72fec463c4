// memlock, module and rules: what this machine's setup lets the module do once it is loaded.
#include <dlfcn.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "checks.h"
#include "module_path.h"
#include "own_descriptors.h"

namespace tcp2rdma::tools::doctor {
namespace {

// The rules a user wrote, without the built-in loopback rule every set begins with.
std::vector<const config::Rule*> file_rules(const config::RuleSet& rules) {
  std::vector<const config::Rule*> out;
  for (const config::Rule& rule : rules.rules()) {
    if (rule.line != 0) out.push_back(&rule);
  }
  return out;
}

std::vector<const config::Rule*> rdma_rules(const config::RuleSet& rules) {
  std::vector<const config::Rule*> out = file_rules(rules);
  std::erase_if(out, [](const config::Rule* rule) { return rule->options.transport != config::Transport::kRdma; });
  return out;
}

std::string count_of(size_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

}  // namespace

Check check_memlock(const RingPlan& plan) { return judge_memlock(read_memlock_facts(), plan); }

Check judge_descriptors(unsigned long soft, unsigned long hard, bool may_raise_hard) {
  std::string limits = "RLIMIT_NOFILE " + std::to_string(soft) + " (hard " + std::to_string(hard) + ")";
  if (soft < hard || may_raise_hard) {
    return passed("descriptors", limits + ": the module's descriptors live above the application's limit");
  }
  unsigned long reserve = transport::OwnDescriptors::top_reserve(soft);
  return warned("descriptors", limits + ", and nothing may rise above it: the module takes up to " +
                                   std::to_string(reserve) +
                                   " descriptors from the top of the application's range, which then meets EMFILE "
                                   "that many earlier (a hard limit above the soft one avoids it: LimitNOFILE=soft:hard)");
}

Check check_descriptors() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return warned("descriptors", "cannot read RLIMIT_NOFILE");
  // Whether the hard limit may rise (CAP_SYS_RESOURCE): tried, and put back.
  rlimit up{limit.rlim_cur, limit.rlim_max == RLIM_INFINITY ? limit.rlim_max : limit.rlim_max + 1};
  bool may_raise = limit.rlim_max == RLIM_INFINITY || setrlimit(RLIMIT_NOFILE, &up) == 0;
  if (may_raise && limit.rlim_max != RLIM_INFINITY) setrlimit(RLIMIT_NOFILE, &limit);
  return judge_descriptors(limit.rlim_cur, limit.rlim_max, may_raise);
}

Check check_module(const std::string& path) {
  // RTLD_LOCAL: its wrappers stay out of this process's symbol lookups, so loading it proves it loads
  // without putting doctor's own calls through it. Its constructor runs, as in every program it is
  // preloaded into. It stays loaded: its exit hook is registered and must find its code at exit.
  if (!preloadable(path)) {
    return failed("module", path + " has a space or colon, which LD_PRELOAD cannot carry",
                  "point TCP2RDMA_MODULE at a path without them (a symlink to the module will do)");
  }
  if (dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL) == nullptr) {
    const char* why = dlerror();
    return failed("module", "cannot load " + path + ": " + (why != nullptr ? why : "unknown error"),
                  "build it (`ninja -C build`) or install it, or point TCP2RDMA_MODULE at libtcp2rdma.so; a missing "
                  "library it needs: install rdma-core's libibverbs1 and librdmacm1");
  }
  return passed("module", path + " loads");
}

RuleFile find_rule_file(const std::string& from_option) {
  RuleFile file;
  if (!from_option.empty()) {
    file.path = from_option;
    file.source = "--rules";
  } else if (const char* env = std::getenv("TCP2RDMA_RULES"); env != nullptr && *env != '\0') {
    file.path = env;
    file.source = "TCP2RDMA_RULES";
  } else if (access(config::kDefaultRulesPath, F_OK) == 0) {
    file.path = config::kDefaultRulesPath;
    file.source = "the default path";
  }
  if (!file.path.empty()) file.loaded = config::load_rules_file(file.path);
  return file;
}

Check check_rules(const RuleFile& rules) {
  if (rules.path.empty()) return passed("rules", "no rule file: every connection stays TCP");
  const config::LoadResult& loaded = rules.loaded;
  if (!loaded.ok()) {
    std::vector<std::string> errors;
    for (const config::Diagnostic& error : loaded.errors) errors.push_back(error.to_string());
    std::string finding = rules.path + " (" + rules.source + ") has " + std::to_string(errors.size()) +
                          (errors.size() == 1 ? " error: " : " errors: ");
    for (size_t i = 0; i < errors.size(); ++i) finding += (i > 0 ? "; " : "") + errors[i];
    return failed("rules", finding,
                  "correct the file (docs/rules.md; `tcp2rdma check FILE` lists the errors): until then the module "
                  "keeps every connection on TCP");
  }
  std::vector<const config::Rule*> rdma = rdma_rules(loaded.rules);
  std::string head =
      rules.path + " (" + rules.source + "): " + count_of(file_rules(loaded.rules).size(), "rule", "rules") + ", ";
  if (rdma.empty()) return warned("rules", head + "none selects RDMA: every connection stays TCP");
  std::string names;
  for (const config::Rule* rule : rdma) names += (names.empty() ? "" : ", ") + rule->name;  // "rule 2" when unnamed
  return passed("rules", head + count_of(rdma.size(), "selects", "select") + " RDMA (" + names + ")");
}

std::vector<const config::Rule*> rules_selecting_rdma(const RuleFile& rules) {
  if (rules.path.empty() || !rules.loaded.ok()) return {};
  return rdma_rules(rules.loaded.rules);
}

uint64_t largest_rdma_buffer(const RuleFile& rules) {
  uint64_t largest = 0;
  for (const config::Rule* rule : rules_selecting_rdma(rules)) {
    largest = std::max(largest, rule->options.buffer_size);
  }
  return largest;
}

}  // namespace tcp2rdma::tools::doctor
