// docs/rules.md's table of options against the parser's defaults (config/options.h): every option the
// rules take is in the table, every row names one, and each documented default, read by the parser's
// own unit functions, is the value a rule without that key gets. A default changed in one place and
// not the other fails here.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "options.h"
#include "rule_loader.h"
#include "rule_set.h"
#include "units.h"

namespace tcp2rdma::config {
namespace {

// The first `code` span of a table cell, or the cell itself.
std::string first_code(const std::string& cell) {
  size_t open = cell.find('`');
  if (open == std::string::npos) return cell;
  size_t close = cell.find('`', open + 1);
  return cell.substr(open + 1, close == std::string::npos ? std::string::npos : close - open - 1);
}

// key -> documented default, from the rows of the "## Options" table.
std::map<std::string, std::string> documented_defaults() {
  std::ifstream in(TCP2RDMA_RULES_DOC);
  std::map<std::string, std::string> rows;
  std::string line;
  bool in_options = false;
  while (std::getline(in, line)) {
    if (line.rfind("## ", 0) == 0) in_options = line == "## Options";
    if (!in_options || line.rfind("| `", 0) != 0) continue;
    std::vector<std::string> cells;
    std::stringstream row(line.substr(1));
    for (std::string cell; std::getline(row, cell, '|');) cells.push_back(cell);
    if (cells.size() < 2) continue;
    rows[first_code(cells[0])] = first_code(cells[1]);
  }
  return rows;
}

uint64_t size_of(const std::string& text) {
  std::string error;
  auto v = parse_size(text, &error);
  EXPECT_TRUE(v.has_value()) << text << ": " << error;
  return v.value_or(~0ull);
}

uint64_t duration_of(const std::string& text) {
  std::string error;
  auto v = parse_duration_us(text, &error);
  EXPECT_TRUE(v.has_value()) << text << ": " << error;
  return v.value_or(~0ull);
}

TEST(DocumentedDefaults, RulesMdStatesTheParsersDefaultOfEveryOption) {
  const ConnectionOptions d;
  // Each option the rule loader takes, and how its documented default must read.
  const std::map<std::string, std::function<bool(const std::string&)>> options = {
      {"transport", [&](const std::string& s) { return s == to_string(d.transport); }},
      {"upgrade", [&](const std::string& s) { return s == to_string(d.upgrade); }},
      {"on_fork", [&](const std::string& s) { return s == to_string(d.on_fork); }},
      {"buffer_size", [&](const std::string& s) { return size_of(s) == d.buffer_size; }},
      {"zcopy_threshold", [&](const std::string& s) { return size_of(s) == d.zcopy_threshold; }},
      {"inline_threshold", [&](const std::string& s) { return size_of(s) == d.inline_threshold; }},
      {"send_queue_depth", [&](const std::string& s) { return std::stoull(s) == d.send_queue_depth; }},
      {"recv_queue_depth", [&](const std::string& s) { return std::stoull(s) == d.recv_queue_depth; }},
      {"link_channels", [&](const std::string& s) { return std::stoull(s) == d.link_channels; }},
      {"connect_timeout", [&](const std::string& s) { return duration_of(s) == d.connect_timeout_us; }},
      {"upgrade_timeout", [&](const std::string& s) { return duration_of(s) == d.upgrade_timeout_us; }},
      {"keepalive", [&](const std::string& s) { return duration_of(s) == d.keepalive_us; }},
      {"linked_wait", [&](const std::string& s) { return duration_of(s) == d.linked_wait_us; }},
      {"busy_poll", [&](const std::string& s) { return s == "adaptive" && d.busy_poll_adaptive && d.busy_poll_us > 0; }},
      {"busy_poll_yield", [&](const std::string& s) { return s == to_string(d.busy_poll_yield); }},
  };
  auto rows = documented_defaults();
  ASSERT_FALSE(rows.empty()) << "no option rows found in " << TCP2RDMA_RULES_DOC;
  for (const auto& [key, matches] : options) {
    auto row = rows.find(key);
    if (row == rows.end()) {
      ADD_FAILURE() << "docs/rules.md has no row for the option " << key;
      continue;
    }
    EXPECT_TRUE(matches(row->second)) << key << ": docs/rules.md says " << row->second;
  }
  for (const auto& [key, value] : rows) {
    EXPECT_TRUE(options.count(key)) << "docs/rules.md documents " << key << ", which is no option the rules take";
  }
}

// A rule that sets every documented option to its documented default loads without an error and
// gets exactly the defaults: the table's keys are the loader's names, and its values the loader's.
TEST(DocumentedDefaults, ARuleSettingEachDocumentedDefaultGetsTheDefaults) {
  std::string yaml = "version: 1\nrules:\n  - name: documented\n";
  for (const auto& [key, value] : documented_defaults()) {
    yaml += "    " + key + ": " + (key == "transport" ? std::string("rdma") : value) + "\n";
  }
  LoadResult loaded = load_rules_text(yaml, "documented.yaml");
  for (const Diagnostic& e : loaded.errors) ADD_FAILURE() << e.to_string();
  ASSERT_TRUE(loaded.ok());
  ConnectionOptions expected;
  expected.transport = Transport::kRdma;
  const Rule* rule = nullptr;
  for (const Rule& r : loaded.rules.rules()) {
    if (r.name == "documented") rule = &r;
  }
  ASSERT_NE(rule, nullptr);
  EXPECT_TRUE(rule->options == expected);
}

}  // namespace
}  // namespace tcp2rdma::config
