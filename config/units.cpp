#include "units.h"

#include <array>
#include <charconv>
#include <limits>

#include "options.h"

namespace tcp2rdma::config {
namespace {

struct Unit {
  std::string_view name;
  uint64_t factor;
};

constexpr std::array<Unit, 4> kSizeUnits = {{{"GiB", 1024 * kMiB}, {"MiB", kMiB}, {"KiB", kKiB}, {"B", 1}}};
constexpr std::array<Unit, 4> kDurationUnits = {
    {{"m", 60 * kMicrosPerSecond}, {"s", kMicrosPerSecond}, {"ms", kMicrosPerMilli}, {"us", 1}}};

// Digits, then optional spaces, then a unit from `units` (or none, when `unit_optional`).
template <size_t N>
std::optional<uint64_t> parse_with_units(std::string_view text, const std::array<Unit, N>& units,
                                         bool unit_optional, std::string_view expected, std::string* error) {
  uint64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec == std::errc::result_out_of_range) {
    *error = "'" + std::string(text) + "' is too large";
    return std::nullopt;
  }
  if (ec != std::errc() || end == text.data()) {
    *error = "expected " + std::string(expected) + ", got '" + std::string(text) + "'";
    return std::nullopt;
  }
  std::string_view unit(end, static_cast<size_t>(text.data() + text.size() - end));
  while (!unit.empty() && unit.front() == ' ') unit.remove_prefix(1);
  if (unit.empty()) {
    if (unit_optional) return value;
    *error = "'" + std::string(text) + "' needs a unit: expected " + std::string(expected);
    return std::nullopt;
  }
  for (const Unit& u : units) {
    if (unit != u.name) continue;
    if (value > std::numeric_limits<uint64_t>::max() / u.factor) {
      *error = "'" + std::string(text) + "' is too large";
      return std::nullopt;
    }
    return value * u.factor;
  }
  *error = "unknown unit '" + std::string(unit) + "': expected " + std::string(expected);
  return std::nullopt;
}

template <size_t N>
std::string format_with_units(uint64_t value, const std::array<Unit, N>& units) {
  for (const Unit& u : units) {
    if (value != 0 && value % u.factor == 0) return std::to_string(value / u.factor) + std::string(u.name);
  }
  return "0" + std::string(units.back().name);
}

}  // namespace

std::optional<uint64_t> parse_size(std::string_view text, std::string* error) {
  return parse_with_units(text, kSizeUnits, true, "a size such as 4096, 64KiB or 1MiB (units B, KiB, MiB, GiB)",
                          error);
}

std::optional<uint64_t> parse_duration_us(std::string_view text, std::string* error) {
  return parse_with_units(text, kDurationUnits, false, "a duration such as 250us, 5ms, 2s or 1m", error);
}

std::string format_size(uint64_t bytes) { return format_with_units(bytes, kSizeUnits); }

std::string format_duration_us(uint64_t micros) { return format_with_units(micros, kDurationUnits); }

const char* to_string(Transport transport) { return transport == Transport::kRdma ? "rdma" : "tcp"; }

const char* to_string(ForkMode mode) {
  return mode == ForkMode::kTcp ? "tcp" : "parent";
}

const char* to_string(PollYield yield) {
  switch (yield) {
    case PollYield::kAuto:
      return "auto";
    case PollYield::kOn:
      return "on";
    case PollYield::kOff:
      return "off";
  }
  return "?";
}

const char* to_string(UpgradeMode mode) {
  switch (mode) {
    case UpgradeMode::kBackground:
      return "background";
    case UpgradeMode::kBeforeReturn:
      return "before-return";
    case UpgradeMode::kRequired:
      return "required";
  }
  return "?";
}

}  // namespace tcp2rdma::config
