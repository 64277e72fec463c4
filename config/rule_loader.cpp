#include "rule_loader.h"

#include <pwd.h>
#include <unistd.h>

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <charconv>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <utility>

#include "glob.h"
#include "units.h"

namespace tcp2rdma::config {
namespace {

constexpr std::array<std::string_view, 3> kTopKeys = {"version", "defaults", "rules"};
constexpr std::array<std::string_view, 6> kMatchKeys = {"program", "role", "remote", "local", "ports", "user"};
constexpr std::array<std::string_view, 15> kOptionKeys = {
    "transport",        "upgrade",          "on_fork",       "buffer_size",     "zcopy_threshold", "inline_threshold",
    "send_queue_depth", "recv_queue_depth", "link_channels", "connect_timeout", "upgrade_timeout", "keepalive",
    "linked_wait",      "busy_poll",        "busy_poll_yield"};
constexpr std::array<std::string_view, 17> kRuleKeys = {
    "name",     "match",           "transport",        "upgrade",          "on_fork",         "buffer_size",
    "zcopy_threshold", "inline_threshold", "send_queue_depth", "recv_queue_depth", "link_channels",
    "connect_timeout", "upgrade_timeout", "keepalive", "linked_wait", "busy_poll", "busy_poll_yield"};

template <size_t N>
std::string one_of(const std::array<std::string_view, N>& keys) {
  std::string list;
  for (std::string_view key : keys) list += (list.empty() ? "" : ", ") + std::string(key);
  return list;
}

template <size_t N>
bool contains(const std::array<std::string_view, N>& keys, std::string_view key) {
  for (std::string_view k : keys) {
    if (k == key) return true;
  }
  return false;
}

// Collects diagnostics for one file; every check reports at the node it concerns.
class Parser {
 public:
  explicit Parser(std::string file) : file_(std::move(file)) {}

  void error(const YAML::Node& at, std::string message) { error(at.Mark(), std::move(message)); }
  void error(const YAML::Mark& mark, std::string message) {
    errors_.push_back({file_, mark.line + 1, mark.column + 1, std::move(message)});
  }
  // In file order, whatever order the checks ran in.
  std::vector<Diagnostic> take_errors() {
    std::stable_sort(errors_.begin(), errors_.end(), [](const Diagnostic& a, const Diagnostic& b) {
      return a.line != b.line ? a.line < b.line : a.column < b.column;
    });
    return std::move(errors_);
  }

  // A mapping's keys, each once and each known; returns false (after reporting) when `node` is no map.
  template <size_t N>
  bool check_keys(const YAML::Node& node, const std::array<std::string_view, N>& known, std::string_view what) {
    if (!node.IsMap()) {
      error(node, "expected " + std::string(what) + " as a mapping of keys to values");
      return false;
    }
    std::set<std::string> seen;
    for (const auto& entry : node) {
      const YAML::Node& key = entry.first;
      std::string name = key.IsScalar() ? key.Scalar() : "";
      if (!key.IsScalar()) {
        error(key, "expected a key name in " + std::string(what));
      } else if (!contains(known, name)) {
        error(key, "unknown key '" + name + "' in " + std::string(what) + ": expected one of " + one_of(known));
      } else if (!seen.insert(name).second) {
        error(key, "duplicate key '" + name + "' in " + std::string(what));
      }
    }
    return true;
  }

  // A scalar, or (with `list_ok`) a sequence of scalars: the values to parse, each with its node.
  std::vector<YAML::Node> scalars(const YAML::Node& node, std::string_view expected) {
    std::vector<YAML::Node> out;
    if (node.IsScalar()) {
      out.push_back(node);
    } else if (node.IsSequence() && node.size() > 0) {
      for (const auto& item : node) {
        if (item.IsScalar()) {
          out.push_back(item);
        } else {
          error(item, "expected " + std::string(expected) + " in this list");
        }
      }
    } else {
      error(node, "expected " + std::string(expected) + " or a non-empty list of them");
    }
    return out;
  }

  void parse_options(const YAML::Node& map, ConnectionOptions* options, bool* transport_set) {
    for (const auto& entry : map) {
      if (!entry.first.IsScalar()) continue;
      const std::string key = entry.first.Scalar();
      const YAML::Node& value = entry.second;
      if (!contains(kOptionKeys, key)) continue;
      if (!value.IsScalar()) {
        error(value, "expected a single value for '" + key + "'");
        continue;
      }
      parse_option(key, value, options, transport_set);
    }
  }

  // off, adaptive (up to the built-in time), or a fixed duration (0 is off).
  void parse_busy_poll(const YAML::Node& value, ConnectionOptions* options) {
    const std::string& text = value.Scalar();
    if (text == "off" || text == "adaptive") {
      options->busy_poll_us = text == "off" ? 0 : ConnectionOptions{}.busy_poll_us;
      options->busy_poll_adaptive = text == "adaptive";
      return;
    }
    std::string why;
    auto micros = parse_duration_us(text, &why);
    if (!micros) return error(value, "busy_poll: expected off, adaptive or a duration: " + why);
    if (*micros > 100 * kMicrosPerMilli) return error(value, "busy_poll must be at most 100ms, got " + text);
    options->busy_poll_us = *micros;
    options->busy_poll_adaptive = false;
  }

  void parse_option(const std::string& key, const YAML::Node& value, ConnectionOptions* options,
                    bool* transport_set) {
    const std::string& text = value.Scalar();
    std::string why;
    if (key == "transport") {
      *transport_set = true;  // present: a bad value is reported as such, not also as missing
      if (text == "rdma" || text == "tcp") {
        options->transport = text == "rdma" ? Transport::kRdma : Transport::kTcp;
      } else {
        error(value, "unknown transport '" + text + "': expected rdma or tcp");
      }
    } else if (key == "upgrade") {
      if (text == "background") {
        options->upgrade = UpgradeMode::kBackground;
      } else if (text == "before-return") {
        options->upgrade = UpgradeMode::kBeforeReturn;
      } else if (text == "required") {
        options->upgrade = UpgradeMode::kRequired;
      } else {
        error(value, "unknown upgrade mode '" + text + "': expected background, before-return or required");
      }
    } else if (key == "on_fork") {
      if (text == "tcp" || text == "parent") {
        options->on_fork = text == "tcp" ? ForkMode::kTcp : ForkMode::kParent;
      } else {
        error(value, "unknown on_fork '" + text + "': expected tcp or parent");
      }
    } else if (key == "buffer_size" || key == "zcopy_threshold" || key == "inline_threshold") {
      auto size = parse_size(text, &why);
      if (!size) return error(value, key + ": " + why);
      if (key == "buffer_size") {
        if (*size < 4 * kKiB || *size > 1024 * kMiB || (*size & (*size - 1)) != 0) {
          return error(value, "buffer_size must be a power of two from 4KiB to 1GiB, got " + text);
        }
        options->buffer_size = *size;
      } else if (key == "zcopy_threshold") {
        if (*size < 4 * kKiB) return error(value, "zcopy_threshold must be at least 4KiB, got " + text);
        options->zcopy_threshold = *size;
      } else {
        if (*size > 1 * kKiB) return error(value, "inline_threshold must be at most 1KiB, got " + text);
        options->inline_threshold = *size;
      }
    } else if (key == "send_queue_depth" || key == "recv_queue_depth" || key == "link_channels") {
      unsigned count = 0;
      auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), count);
      if (ec != std::errc() || end != text.data() + text.size() || count < 1 || count > 16384) {
        return error(value, key + " must be a whole number from 1 to 16384, got '" + text + "'");
      }
      (key == "send_queue_depth"   ? options->send_queue_depth
       : key == "recv_queue_depth" ? options->recv_queue_depth
                                   : options->link_channels) = count;
    } else if (key == "linked_wait") {
      // Zero turns it off; a wait of a second or more would be no background upgrade at all.
      auto micros = parse_duration_us(text, &why);
      if (!micros) return error(value, key + ": " + why);
      if (*micros >= kMicrosPerSecond) return error(value, "linked_wait must be shorter than 1s, got " + text);
      options->linked_wait_us = *micros;
    } else if (key == "busy_poll") {
      parse_busy_poll(value, options);
    } else if (key == "busy_poll_yield") {
      if (text == "auto") {
        options->busy_poll_yield = PollYield::kAuto;
      } else if (text == "on") {
        options->busy_poll_yield = PollYield::kOn;
      } else if (text == "off") {
        options->busy_poll_yield = PollYield::kOff;
      } else {
        return error(value, "busy_poll_yield: expected auto, on or off, got '" + text + "'");
      }
    } else {  // the three durations
      auto micros = parse_duration_us(text, &why);
      if (!micros) return error(value, key + ": " + why);
      if (*micros == 0) return error(value, key + " must be longer than zero");
      (key == "connect_timeout" ? options->connect_timeout_us
                                : key == "upgrade_timeout" ? options->upgrade_timeout_us : options->keepalive_us) =
          *micros;
    }
  }

  void parse_match(const YAML::Node& match, Rule* rule) {
    if (!check_keys(match, kMatchKeys, "match")) return;
    std::string why;
    if (const YAML::Node n = match["program"]) {
      for (const YAML::Node& item : scalars(n, "a program name or glob")) {
        if (!glob_valid(item.Scalar())) {
          error(item, "bad program pattern '" + item.Scalar() + "': empty or an unclosed '['");
        } else {
          rule->programs.push_back(item.Scalar());
        }
      }
    }
    if (const YAML::Node n = match["role"]) {
      std::string role = n.IsScalar() ? n.Scalar() : "";
      if (role == "client") {
        rule->role = Role::kClient;
      } else if (role == "server") {
        rule->role = Role::kServer;
      } else if (role != "any") {
        error(n, "unknown role '" + role + "': expected client, server or any");
      }
    }
    for (auto [key, list] : {std::pair{"remote", &rule->remote}, std::pair{"local", &rule->local}}) {
      if (const YAML::Node n = match[key]) {
        for (const YAML::Node& item : scalars(n, "an address or CIDR block")) {
          auto cidr = parse_cidr(item.Scalar(), &why);
          if (cidr) list->push_back(*cidr);
          else error(item, why);
        }
      }
    }
    if (const YAML::Node n = match["ports"]) {
      for (const YAML::Node& item : scalars(n, "a port or port range")) {
        auto range = parse_port_range(item.Scalar(), &why);
        if (range) rule->ports.push_back(*range);
        else error(item, why);
      }
    }
    if (const YAML::Node n = match["user"]) {
      for (const YAML::Node& item : scalars(n, "a user name or uid")) parse_user(item, rule);
    }
  }

  void parse_user(const YAML::Node& item, Rule* rule) {
    const std::string& text = item.Scalar();
    uint32_t uid = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), uid);
    if (ec == std::errc() && end == text.data() + text.size()) {
      rule->uids.push_back(uid);
      return;
    }
    passwd entry{}, *found = nullptr;
    std::array<char, 4096> buffer{};
    if (getpwnam_r(text.c_str(), &entry, buffer.data(), buffer.size(), &found) == 0 && found != nullptr) {
      rule->uids.push_back(found->pw_uid);
    } else {
      error(item, "unknown user '" + text + "': expected a user name of this system or a numeric uid");
    }
  }

  void parse_rule(const YAML::Node& node, size_t index, const ConnectionOptions& defaults,
                  bool defaults_set_transport, std::map<std::string, int>* names, std::vector<Rule>* rules) {
    Rule rule;
    rule.line = node.Mark().line + 1;
    rule.name = "rule " + std::to_string(index + 1);
    if (!check_keys(node, kRuleKeys, "a rule")) return;
    if (const YAML::Node n = node["name"]) {
      if (!n.IsScalar() || n.Scalar().empty()) {
        error(n, "expected a rule name (a non-empty string)");
      } else if (auto [it, fresh] = names->emplace(n.Scalar(), n.Mark().line + 1); !fresh) {
        error(n, "duplicate rule name '" + n.Scalar() + "' (first used on line " + std::to_string(it->second) + ")");
      } else {
        rule.name = n.Scalar();
      }
    }
    if (const YAML::Node n = node["match"]) parse_match(n, &rule);
    rule.options = defaults;
    bool transport_set = defaults_set_transport;
    parse_options(node, &rule.options, &transport_set);
    if (!transport_set) {
      error(node, "rule '" + rule.name + "' has no transport: expected 'transport: rdma' or 'transport: tcp' "
                  "(in the rule or in defaults)");
    }
    rules->push_back(std::move(rule));
  }

  LoadResult parse(const YAML::Node& root) {
    LoadResult result;
    if (root.IsNull()) {
      error(YAML::Mark(), "empty rule file: expected a mapping with 'version: 1' and 'rules'");
      result.errors = take_errors();
      return result;
    }
    if (!check_keys(root, kTopKeys, "the rule file")) {
      result.errors = take_errors();
      return result;
    }
    const YAML::Node version = root["version"];
    if (!version) {
      error(root, "missing 'version: 1' at the top of the rule file");
    } else if (!version.IsScalar() || version.Scalar() != "1") {
      error(version, "unsupported version '" + (version.IsScalar() ? version.Scalar() : std::string("?")) +
                         "': this tcp2rdma reads version 1");
    }
    ConnectionOptions defaults;
    bool defaults_set_transport = false;
    if (const YAML::Node d = root["defaults"]) {
      if (check_keys(d, kOptionKeys, "defaults")) parse_options(d, &defaults, &defaults_set_transport);
    }
    std::vector<Rule> rules;
    if (const YAML::Node list = root["rules"]) {
      if (!list.IsSequence()) {
        error(list, "expected 'rules' to be a list of rules (each item starting with '- ')");
      } else {
        std::map<std::string, int> names;
        for (size_t i = 0; i < list.size(); ++i) parse_rule(list[i], i, defaults, defaults_set_transport, &names, &rules);
      }
    }
    result.errors = take_errors();
    if (result.ok()) result.rules = RuleSet(file_, std::move(rules), defaults);
    return result;
  }

 private:
  std::string file_;
  std::vector<Diagnostic> errors_;
};

std::optional<std::string> read_file(const std::string& path, std::string* why) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *why = "cannot read the rule file: " + std::string(std::strerror(errno));
    return std::nullopt;
  }
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

std::string Diagnostic::to_string() const {
  if (line == 0) return file + ": " + message;
  return file + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " + message;
}

LoadResult load_rules_text(std::string_view text, const std::string& file_name) {
  Parser parser(file_name);
  try {
    return parser.parse(YAML::Load(std::string(text)));
  } catch (const YAML::Exception& e) {
    parser.error(e.mark, "YAML syntax error: " + e.msg);
  } catch (const std::exception& e) {
    parser.error(YAML::Mark::null_mark(), std::string("cannot parse: ") + e.what());
  }
  LoadResult result;
  result.errors = parser.take_errors();
  return result;
}

LoadResult load_rules_file(const std::string& path) {
  std::string why;
  std::optional<std::string> text = read_file(path, &why);
  if (!text) {
    LoadResult result;
    result.errors.push_back({path, 0, 0, why});
    return result;
  }
  return load_rules_text(*text, path);
}

}  // namespace tcp2rdma::config
