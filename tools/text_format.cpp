#include "text_format.h"

#include <cstdio>
#include <iterator>

namespace tcp2rdma::tools {

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
      out += escaped;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string format_bytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  size_t unit = 0;
  uint64_t scale = 1;
  while (unit + 1 < std::size(kUnits) && bytes >= scale * 1024) {
    scale *= 1024;
    ++unit;
  }
  char text[32];
  if (bytes % scale == 0) {
    std::snprintf(text, sizeof text, "%llu %s", static_cast<unsigned long long>(bytes / scale), kUnits[unit]);
  } else {
    std::snprintf(text, sizeof text, "%.1f %s", static_cast<double>(bytes) / static_cast<double>(scale), kUnits[unit]);
  }
  return text;
}

std::string format_bytes_short(uint64_t bytes) {
  static constexpr char kUnits[] = {'K', 'M', 'G', 'T', 'P', 'E'};
  char text[32];
  if (bytes < 1024) {
    std::snprintf(text, sizeof text, "%llu", static_cast<unsigned long long>(bytes));
    return text;
  }
  double value = static_cast<double>(bytes);
  size_t unit = 0;
  for (value /= 1024; value >= 1023.95 && unit + 1 < std::size(kUnits); value /= 1024) ++unit;
  // Rounded as printed: 9.96 KiB shows as 10K, not 10.0K.
  if (value < 9.95) {
    std::snprintf(text, sizeof text, "%.1f%c", value, kUnits[unit]);
  } else {
    std::snprintf(text, sizeof text, "%.0f%c", value, kUnits[unit]);
  }
  return text;
}

}  // namespace tcp2rdma::tools
