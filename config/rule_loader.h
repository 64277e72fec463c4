// Rule files (YAML, docs/rules.md) to a RuleSet, with every mistake reported as file:line:column.
// Nothing here throws: yaml-cpp's exceptions stop at this boundary.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "rule_set.h"

namespace tcp2rdma::config {

struct Diagnostic {
  std::string file;
  int line = 0;    // 1-based; 0 when the problem has no position (an unreadable file, a variable)
  int column = 0;  // 1-based
  std::string message;

  std::string to_string() const;  // "file:line:column: message" (or "file: message")
};

struct LoadResult {
  RuleSet rules = RuleSet::builtin();
  std::vector<Diagnostic> errors;  // all of them, in file order; empty when the rules are usable
  bool ok() const { return errors.empty(); }
};

// Parses `text` as a rule file named `file_name` (used in diagnostics).
LoadResult load_rules_text(std::string_view text, const std::string& file_name);

// Reads and parses the file at `path`.
LoadResult load_rules_file(const std::string& path);

// getenv-shaped, so tests can pass their own environment.
using Environment = std::function<const char*(const char*)>;

inline constexpr const char* kDefaultRulesPath = "/etc/tcp2rdma/rules.yaml";

// What the preload module runs once per process: the file named by TCP2RDMA_RULES, else
// /etc/tcp2rdma/rules.yaml if it exists, else the built-in set; then the environment overrides
// (TCP2RDMA_TRANSPORT, TCP2RDMA_UPGRADE, TCP2RDMA_BUFFER_SIZE, TCP2RDMA_ZCOPY_THRESHOLD,
// TCP2RDMA_INLINE_THRESHOLD). On any error the result's rules send every connection over TCP and
// `errors` says why; the application is never stopped.
LoadResult load_effective_rules(const Environment& env);

}  // namespace tcp2rdma::config
