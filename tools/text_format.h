// Text that more than one subcommand prints: JSON strings, and sizes as people read them.
#pragma once

#include <cstdint>
#include <string>

namespace tcp2rdma::tools {

// `text` as a JSON string literal, quotes included, every control character escaped: findings quote
// file contents and dlerror() text, and stats quote program names, which can hold anything.
std::string json_string(const std::string& text);

// A size as people read it in a sentence: "64 KiB", "7.5 MiB", "512 B".
std::string format_bytes(uint64_t bytes);

// A size in a table column, as `ls -h` prints one: "512", "1.5K", "64K", "7.5M", "12G" (one decimal
// below 10, binary units).
std::string format_bytes_short(uint64_t bytes);

}  // namespace tcp2rdma::tools
