// Where the rules of a process come from, and the environment variables that override them.
#include <unistd.h>

#include <string>

#include "rule_loader.h"
#include "units.h"

namespace tcp2rdma::config {
namespace {

// Applies one size variable to every decision, or reports a bad value.
void override_size(const Environment& env, const char* name, uint64_t ConnectionOptions::*field, LoadResult* result) {
  const char* text = env(name);
  if (text == nullptr || *text == '\0') return;
  std::string why;
  auto size = parse_size(text, &why);
  if (!size) {
    result->errors.push_back({name, 0, 0, why});
    return;
  }
  result->rules.update_options([&](ConnectionOptions& options) { options.*field = *size; });
}

void apply_environment(const Environment& env, LoadResult* result) {
  override_size(env, "TCP2RDMA_BUFFER_SIZE", &ConnectionOptions::buffer_size, result);
  override_size(env, "TCP2RDMA_ZCOPY_THRESHOLD", &ConnectionOptions::zcopy_threshold, result);
  override_size(env, "TCP2RDMA_INLINE_THRESHOLD", &ConnectionOptions::inline_threshold, result);
  if (const char* mode = env("TCP2RDMA_UPGRADE"); mode != nullptr && *mode != '\0') {
    std::string m = mode;
    UpgradeMode upgrade = m == "required" ? UpgradeMode::kRequired
                          : m == "before-return" ? UpgradeMode::kBeforeReturn
                                                  : UpgradeMode::kBackground;
    if (m != "background" && m != "before-return" && m != "required") {
      result->errors.push_back({"TCP2RDMA_UPGRADE", 0, 0,
                                "unknown upgrade mode '" + m + "': expected background, before-return or required"});
    } else {
      result->rules.update_options([&](ConnectionOptions& options) { options.upgrade = upgrade; });
    }
  }
  if (const char* transport = env("TCP2RDMA_TRANSPORT"); transport != nullptr && *transport != '\0') {
    std::string t = transport;
    if (t == "tcp") {
      result->rules.force_tcp();
    } else if (t != "rules") {
      result->errors.push_back({"TCP2RDMA_TRANSPORT", 0, 0,
                                "unknown value '" + t + "': expected tcp (everything stays TCP) or rules"});
    }
  }
}

}  // namespace

LoadResult load_effective_rules(const Environment& env) {
  LoadResult result;
  const char* named = env("TCP2RDMA_RULES");
  if (named != nullptr && *named != '\0') {
    result = load_rules_file(named);
  } else if (access(kDefaultRulesPath, F_OK) == 0) {
    result = load_rules_file(kDefaultRulesPath);
  }
  if (result.ok()) apply_environment(env, &result);
  // A rule file or variable with a mistake must not half-apply: every connection stays TCP.
  if (!result.ok()) result.rules.force_tcp();
  return result;
}

}  // namespace tcp2rdma::config
