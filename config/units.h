// Sizes and durations as written in rule files and environment variables: "64KiB", "4096", "5ms".
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tcp2rdma::config {

// A size: a whole number of bytes with an optional unit B, KiB, MiB or GiB ("64KiB", "4096").
// On failure, *error says what was expected.
std::optional<uint64_t> parse_size(std::string_view text, std::string* error);

// A duration with a required unit us, ms, s or m ("250us", "5ms", "2s"), returned in microseconds.
std::optional<uint64_t> parse_duration_us(std::string_view text, std::string* error);

// "64KiB", "1MiB", "1000B"; "5ms", "2s", "250us": the largest unit that represents the value exactly.
std::string format_size(uint64_t bytes);
std::string format_duration_us(uint64_t micros);

}  // namespace tcp2rdma::config
