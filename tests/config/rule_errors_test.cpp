// Bad rule files: each gives exactly the expected message at the expected line and column, and a file
// with several mistakes reports all of them.
#include <gtest/gtest.h>

#include <cctype>
#include <ostream>
#include <string>

#include "rule_loader.h"

namespace tcp2rdma::config {
namespace {

struct BadFile {
  const char* what;
  const char* yaml;
  int line;
  int column;
  const char* message_part;
};

const BadFile kBadFiles[] = {
    {"empty file", "", 1, 1, "empty rule file"},
    {"a list at the top", "- a\n- b\n", 1, 1, "expected the rule file as a mapping"},
    {"missing version", "rules: []\n", 1, 1, "missing 'version: 1'"},
    {"unsupported version", "version: 2\nrules: []\n", 1, 10, "unsupported version '2'"},
    {"version as a list", "version: [1]\n", 1, 10, "unsupported version '?'"},
    {"unknown top-level key", "version: 1\nrulez: []\n", 2, 1, "unknown key 'rulez' in the rule file"},
    {"duplicate top-level key", "version: 1\nversion: 1\n", 2, 1, "duplicate key 'version'"},
    {"rules not a list", "version: 1\nrules:\n  name: x\n", 3, 3, "expected 'rules' to be a list"},
    {"rule not a mapping", "version: 1\nrules:\n  - just-a-name\n", 3, 5, "expected a rule as a mapping"},
    {"unknown rule key", "version: 1\nrules:\n  - name: a\n    transprot: rdma\n", 4, 5,
     "unknown key 'transprot' in a rule"},
    {"rule without transport", "version: 1\nrules:\n  - name: a\n", 3, 5, "rule 'a' has no transport"},
    {"unknown transport", "version: 1\nrules:\n  - transport: infiniband\n", 3, 16,
     "unknown transport 'infiniband'"},
    {"unknown upgrade mode", "version: 1\nrules:\n  - transport: rdma\n    upgrade: eager\n", 4, 14,
     "unknown upgrade mode 'eager'"},
    {"unknown fork mode", "version: 1\nrules:\n  - transport: rdma\n    on_fork: child\n", 4, 14,
     "unknown on_fork 'child': expected tcp or parent"},
    {"duplicate rule names", "version: 1\nrules:\n  - name: a\n    transport: tcp\n  - name: a\n    transport: rdma\n",
     5, 11, "duplicate rule name 'a' (first used on line 3)"},
    {"empty rule name", "version: 1\nrules:\n  - name: ''\n    transport: tcp\n", 3, 11, "expected a rule name"},
    {"unknown match key", "version: 1\nrules:\n  - transport: rdma\n    match:\n      hostname: x\n", 5, 7,
     "unknown key 'hostname' in match"},
    {"match not a mapping", "version: 1\nrules:\n  - transport: rdma\n    match: iperf3\n", 4, 12,
     "expected match as a mapping"},
    {"bad CIDR", "version: 1\nrules:\n  - transport: rdma\n    match:\n      remote: 10.0.0.0/33\n", 5, 15,
     "bad prefix length in '10.0.0.0/33'"},
    {"not an address", "version: 1\nrules:\n  - transport: rdma\n    match:\n      remote: [10.0.0.0/8, gateway]\n", 5,
     28, "expected an IPv4 or IPv6 address"},
    {"host bits set", "version: 1\nrules:\n  - transport: rdma\n    match:\n      local: 10.1.0.0/8\n", 5, 14,
     "did you mean 10.0.0.0/8?"},
    {"bad IPv6 CIDR", "version: 1\nrules:\n  - transport: rdma\n    match:\n      remote: 'fd00::/200'\n", 5, 15,
     "bad prefix length"},
    {"reversed port range", "version: 1\nrules:\n  - transport: rdma\n    match:\n      ports: 6000-5000\n", 5, 14,
     "is reversed or empty"},
    {"port zero", "version: 1\nrules:\n  - transport: rdma\n    match:\n      ports: 0\n", 5, 14,
     "expected a port 1..65535"},
    {"port too large", "version: 1\nrules:\n  - transport: rdma\n    match:\n      ports: [80, 70000]\n", 5, 19,
     "got '70000'"},
    {"port as a mapping", "version: 1\nrules:\n  - transport: rdma\n    match:\n      ports: {a: 1}\n", 5, 14,
     "expected a port or port range or a non-empty list"},
    {"empty port list", "version: 1\nrules:\n  - transport: rdma\n    match:\n      ports: []\n", 5, 14,
     "non-empty list"},
    {"unknown role", "version: 1\nrules:\n  - transport: rdma\n    match:\n      role: peer\n", 5, 13,
     "unknown role 'peer'"},
    {"unclosed glob", "version: 1\nrules:\n  - transport: rdma\n    match:\n      program: 'redis-[sc'\n", 5, 16,
     "bad program pattern"},
    {"unknown user", "version: 1\nrules:\n  - transport: rdma\n    match:\n      user: no-such-user-t2r\n", 5, 13,
     "unknown user 'no-such-user-t2r'"},
    {"unknown size unit", "version: 1\ndefaults:\n  buffer_size: 64KB\n", 3, 16, "unknown unit 'KB'"},
    {"buffer not a power of two", "version: 1\ndefaults:\n  buffer_size: 3MiB\n", 3, 16,
     "buffer_size must be a power of two"},
    {"buffer too small", "version: 1\ndefaults:\n  buffer_size: 1KiB\n", 3, 16, "from 4KiB to 1GiB"},
    {"zcopy threshold too small", "version: 1\ndefaults:\n  zcopy_threshold: 100\n", 3, 20,
     "zcopy_threshold must be at least 4KiB"},
    {"inline threshold too large", "version: 1\ndefaults:\n  inline_threshold: 2KiB\n", 3, 21,
     "inline_threshold must be at most 1KiB"},
    {"queue depth zero", "version: 1\ndefaults:\n  send_queue_depth: 0\n", 3, 21, "from 1 to 16384"},
    {"queue depth not a number", "version: 1\ndefaults:\n  recv_queue_depth: deep\n", 3, 21, "got 'deep'"},
    {"link channels too many", "version: 1\ndefaults:\n  link_channels: 20000\n", 3, 18, "link_channels must be a whole number from 1 to 16384"},
    {"linked wait too long", "version: 1\ndefaults:\n  linked_wait: 2s\n", 3, 16, "linked_wait must be shorter than 1s"},
    {"linked wait not a duration", "version: 1\ndefaults:\n  linked_wait: soon\n", 3, 16, "linked_wait: "},
    {"busy poll not a mode", "version: 1\ndefaults:\n  busy_poll: sometimes\n", 3, 14,
     "busy_poll: expected off, adaptive or a duration"},
    {"busy poll yield not a mode", "version: 1\ndefaults:\n  busy_poll_yield: sometimes\n", 3, 20,
     "busy_poll_yield: expected auto, on or off"},
    {"busy poll too long", "version: 1\ndefaults:\n  busy_poll: 1s\n", 3, 14, "busy_poll must be at most 100ms"},
    {"duration without unit", "version: 1\ndefaults:\n  connect_timeout: 5\n", 3, 20, "needs a unit"},
    {"unknown duration unit", "version: 1\ndefaults:\n  keepalive: 1h\n", 3, 14, "unknown unit 'h'"},
    {"zero duration", "version: 1\ndefaults:\n  upgrade_timeout: 0ms\n", 3, 20, "must be longer than zero"},
    {"option as a list", "version: 1\ndefaults:\n  buffer_size: [1MiB]\n", 3, 16, "expected a single value"},
    {"unknown defaults key", "version: 1\ndefaults:\n  name: x\n", 3, 3, "unknown key 'name' in defaults"},
    {"defaults not a mapping", "version: 1\ndefaults: rdma\n", 2, 11, "expected defaults as a mapping"},
    {"YAML syntax: bad indentation", "version: 1\nrules:\n  - transport: rdma\n   match: x\n", 4, 4,
     "YAML syntax error"},
    {"YAML syntax: unclosed bracket", "version: 1\nrules: [\n", 3, 1, "YAML syntax error"},
};

// Names the case in gtest's output instead of dumping the struct's bytes.
void PrintTo(const BadFile& bad, std::ostream* out) { *out << bad.what; }

class BadRuleFile : public ::testing::TestWithParam<BadFile> {};

TEST_P(BadRuleFile, ReportsWhatAndWhere) {
  const BadFile& bad = GetParam();
  LoadResult result = load_rules_text(bad.yaml, "rules.yaml");
  ASSERT_FALSE(result.ok()) << bad.what;
  // The mistake is reported (a file may also draw follow-on errors, such as a rule left without its
  // transport by a misspelt key), with its position.
  const Diagnostic* found = nullptr;
  for (const Diagnostic& d : result.errors) {
    if (d.message.find(bad.message_part) != std::string::npos) found = &d;
  }
  ASSERT_NE(found, nullptr) << bad.what << ": first error is " << result.errors.front().to_string();
  std::string position = "rules.yaml:" + std::to_string(bad.line) + ":" + std::to_string(bad.column) + ": ";
  EXPECT_EQ(found->to_string().rfind(position, 0), 0u) << bad.what << ": " << found->to_string();
}

INSTANTIATE_TEST_SUITE_P(AllMistakes, BadRuleFile, ::testing::ValuesIn(kBadFiles),
                         [](const ::testing::TestParamInfo<BadFile>& param_info) {
                           std::string name;
                           for (const char* c = param_info.param.what; *c != '\0'; ++c) {
                             name += std::isalnum(static_cast<unsigned char>(*c)) ? *c : '_';
                           }
                           return name;
                         });

TEST(RuleErrors, EveryMistakeInAFileIsReported) {
  LoadResult result = load_rules_text(
      "version: 1\n"
      "defaults:\n"
      "  buffer_size: 3MiB\n"
      "rules:\n"
      "  - name: a\n"
      "    transport: warp\n"
      "    match:\n"
      "      ports: 9-1\n"
      "      remote: nowhere\n",
      "many.yaml");
  ASSERT_EQ(result.errors.size(), 4u);
  // In file order, though the checks run in another.
  EXPECT_EQ(result.errors[0].to_string(), "many.yaml:3:16: buffer_size must be a power of two from 4KiB to 1GiB, got 3MiB");
  EXPECT_EQ(result.errors[1].to_string(), "many.yaml:6:16: unknown transport 'warp': expected rdma or tcp");
  EXPECT_EQ(result.errors[2].line, 8);
  EXPECT_EQ(result.errors[3].line, 9);
}

TEST(RuleErrors, UnreadableFile) {
  LoadResult result = load_rules_file("/nonexistent/t2r/rules.yaml");
  ASSERT_EQ(result.errors.size(), 1u);
  EXPECT_EQ(result.errors[0].to_string(),
            "/nonexistent/t2r/rules.yaml: cannot read the rule file: No such file or directory");
}

TEST(RuleErrors, AFileThatFailsKeepsEverythingOnTcp) {
  LoadResult result = load_rules_text("version: 1\nrules:\n  - transport: rdma\n    match: {ports: 0}\n", "x.yaml");
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.rules.source(), "built-in");
  for (const Rule& rule : result.rules.rules()) EXPECT_EQ(rule.options.transport, Transport::kTcp);
}

}  // namespace
}  // namespace tcp2rdma::config
